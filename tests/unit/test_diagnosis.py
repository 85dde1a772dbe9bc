"""The cause → message mapping (lpxtop/engine/diagnosis.py): each common mistake gets the advice that fixes it."""

from __future__ import annotations

import pytest

from lpxtop.engine.diagnosis import (
    MODELS_REQUEST,
    explain,
    model_matches,
    model_not_served,
    no_model_listed,
    nothing_listens,
    server_words,
)
from lpxtop.model.endpoint import EndpointConfig


def ep(url: str = "http://127.0.0.1:8000/v1", **kw) -> EndpointConfig:
    return EndpointConfig(name="e", url=url, **kw)


def test_refused_names_host_and_port_and_asks_if_the_server_runs():
    text = explain("refused", "connection refused: nothing listens on that port", ep("http://127.0.0.1:18001/v1"))
    assert text == "nothing listens on 127.0.0.1:18001 — is the server running?"
    assert text == nothing_listens("127.0.0.1:18001")  # the ports panel says the same
    assert explain("refused", "connection refused: x", ep("http://[::1]:9/v1")).startswith("nothing listens on [::1]:9 ")


def test_refused_by_a_proxy_and_other_connect_failures_keep_their_words():
    proxy = "the proxy http://127.0.0.1:3128 refused the connection: connection refused"
    assert explain("refused", proxy, ep()) == proxy
    other = "could not connect: [Errno 113] No route to host"
    assert explain("refused", other, ep()) == other


@pytest.mark.parametrize("words", ["TLS failed: [SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
                                   "TLS failed: [SSL: RECORD_LAYER_FAILURE] record layer failure (_ssl.c:1000)",
                                   "TLS failed: [SSL: PACKET_LENGTH_TOO_LONG] packet length too long"])
def test_https_to_a_plain_http_server_says_use_http(words):
    text = explain("tls", words, ep("https://127.0.0.1:8000/v1"))
    assert text == "use http://127.0.0.1:8000/v1: 127.0.0.1:8000 answers plain HTTP, not TLS"


def test_a_certificate_problem_is_not_mistaken_for_plain_http():
    words = "TLS failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"
    assert explain("tls", words, ep("https://127.0.0.1:8000/v1")) == words


def test_dns_names_the_host():
    text = explain("dns", "name lookup failed: Name or service not known", ep("http://gpu-nod3:8000/v1"))
    assert text == "cannot find the host 'gpu-nod3' (Name or service not known): check the host name in the URL"


@pytest.mark.parametrize("kind", ["http_401", "http_403"])
def test_auth_without_a_key_says_how_to_give_one(kind):
    text = explain(kind, "HTTP 401: You didn't provide an API key.", ep(), status=int(kind[-3:]))
    assert text.startswith("the server wants an API key: pass --api-key-env NAME, the environment variable that "
                           "holds it (or api_key_env in the config file)")
    assert text.endswith("(the server said: You didn't provide an API key.)")


def test_auth_with_a_key_variable_that_is_not_set(monkeypatch):
    monkeypatch.delenv("LPXTOP_TEST_KEY", raising=False)
    text = explain("http_401", "HTTP 401 on GET /models: no key", ep(api_key_env="LPXTOP_TEST_KEY"),
                   request=MODELS_REQUEST)
    assert text.startswith("the server wants an API key, and $LPXTOP_TEST_KEY is not set (or empty)")


def test_auth_with_a_key_the_server_refuses(monkeypatch):
    monkeypatch.setenv("LPXTOP_TEST_KEY", "sk-wrong-key-123456")
    e = ep(api_key_env="LPXTOP_TEST_KEY")
    assert explain("http_401", "HTTP 401: bad key", e, status=401).startswith(
        "the server refused the key in $LPXTOP_TEST_KEY: check it")
    assert explain("http_403", "HTTP 403: no", e, status=403).startswith(
        "the key in $LPXTOP_TEST_KEY is not allowed here")
    for kind in ("http_401", "http_403"):
        assert "sk-wrong-key-123456" not in explain(kind, "HTTP 401: x", e)


def test_404_on_models_off_v1_says_the_base_url_is_wrong():
    text = explain("http_404", "HTTP 404 on GET /models: 404: Not Found", ep("http://127.0.0.1:8000/api"),
                   request=MODELS_REQUEST)
    assert text == ("GET /api/models: try http://127.0.0.1:8000/v1 — the base URL is probably wrong "
                    "(OpenAI-compatible servers serve /v1) (the server said: 404: Not Found)")


def test_404_on_the_probe_off_v1_says_the_same():
    text = explain("http_404", "HTTP 404: Not Found", ep("http://127.0.0.1:8000/openai"))
    assert text.startswith("POST /openai/chat/completions: try http://127.0.0.1:8000/v1 — the base URL is probably "
                           "wrong")


def test_404_on_v1_models_is_not_blamed_on_the_base_url():
    text = explain("http_404", "HTTP 404 on GET /models: Not Found", ep(), request=MODELS_REQUEST)
    assert "base URL" not in text and "--model" in text


def test_404_that_names_the_model_is_about_the_model():
    text = explain("http_404", "HTTP 404: The model `qwen-7` does not exist.", ep(model="qwen-7"), status=404)
    assert text == ("the server has no model 'qwen-7': The model `qwen-7` does not exist. "
                    "(pass a model it serves with --model)")


def test_a_model_it_does_not_serve_lists_the_ones_it_does_and_never_says_stop():
    text = model_not_served("qwen-7b", ["Qwen/Qwen2.5-7B-Instruct", "llama-8b"])
    assert text == ("the server does not serve model 'qwen-7b'; it serves Qwen/Qwen2.5-7B-Instruct, llama-8b: "
                    "pass one with --model (or model in the config file)")
    many = model_not_served("x", [f"m{i}" for i in range(9)])
    assert "m0, m1, m2, m3, m4 and 4 more" in many
    assert "stop" not in text and "stale" not in text


def test_no_model_listed():
    assert no_model_listed(ep()) == ("GET /v1/models listed no model: load one into the server, or name it with "
                                     "--model (or model in the config file)")


@pytest.mark.parametrize("kind", ["first_token_timeout", "read_timeout", "http_429", "http_5xx", "stream_cut",
                                  "bad_json", "error_event", "empty", "other"])
def test_other_kinds_keep_their_message(kind):
    assert explain(kind, "whatever it was", ep()) == "whatever it was"


def test_server_words():
    assert server_words("HTTP 401: no key") == "no key"
    assert server_words("HTTP 404 on GET /models: gone") == "gone"
    assert server_words("connection refused: x") is None


def test_model_matches_is_lenient_about_what_servers_add():
    assert model_matches("llama3", ["llama3:latest"]) and model_matches("Llama-3-8B", ["meta-llama/Llama-3-8B"])
    assert not model_matches("qwen-7b", ["llama-8b"])
