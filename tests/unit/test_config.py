"""Endpoint URLs and the TOML config file: accepted forms, and errors that name the line and the key."""

from __future__ import annotations

import pytest

from lpxtop.checks import ConfigError
from lpxtop.config import endpoints_from_urls, load_config_file, normalize_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/chat/completions", "http://127.0.0.1:8000/v1"),
        ("https://api.example.com/openai/v1", "https://api.example.com/openai/v1"),
        ("localhost:30000", "http://localhost:30000/v1"),
    ],
)
def test_url_forms(given, expected):
    assert normalize_url(given) == expected


@pytest.mark.parametrize("bad", ["", "ftp://x:1", "http://:8000", "127.0.0.1:99999", "http://u:p@h:1/v1"])
def test_bad_urls_are_config_errors(bad):
    with pytest.raises(ConfigError):
        normalize_url(bad)


def test_several_urls_get_distinct_names_and_overrides():
    eps = endpoints_from_urls(["127.0.0.1:8000", "127.0.0.1:8000/v1", "127.0.0.1:30000"], max_tokens=7, model=None)
    assert [e.name for e in eps] == ["127.0.0.1:8000", "127.0.0.1:8000#2", "127.0.0.1:30000"]
    assert {e.max_tokens for e in eps} == {7}


GOOD = """\
[defaults]
interval = 1.5
max_tokens = 16

[[endpoint]]
name = "vllm"
url = "127.0.0.1:8000"
model = "qwen-7b"
api_key_env = "VLLM_KEY"
headers = { "X-Team" = "infra" }

[[endpoint]]
name = "llama"
url = "http://127.0.0.1:8080/v1"
api = "completions"
timeout = 10
prompt = "hi"

[alerts]
gpu_mem_warning_pct = 85
"""


def test_good_file(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text(GOOD)
    cfg = load_config_file(path)
    vllm, llama = cfg.endpoints
    assert (vllm.name, vllm.url, vllm.model, vllm.api_key_env) == ("vllm", "http://127.0.0.1:8000/v1", "qwen-7b", "VLLM_KEY")
    assert vllm.headers == (("X-Team", "infra"),)
    assert vllm.interval_s == 1.5 and vllm.max_tokens == 16
    assert (llama.api, llama.timeout_s, llama.prompt, llama.interval_s) == ("completions", 10.0, "hi", 1.5)
    assert cfg.alerts == {"gpu_mem_warning_pct": 85}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[[endpoint]]\nurl = "127.0.0.1:8000"\nmax_tokens = "many"\n', 3, "'max_tokens' must be an integer"),
        ('[[endpoint]]\nurl = "a:1"\n\n[[endpoint]]\nurl = "b:2"\nintreval = 2\n', 6, "unknown key 'intreval'"),
        ('[[endpoint]]\nurl = "127.0.0.1:8000"\napi = "responses"\n', 3, "'api' must be"),
        ('[[endpoint]]\nname = "x"\n', 1, "has no 'url'"),
        ('[[endpoint]]\nurl = "ftp://h:1"\n', 2, "key 'url'"),
        ('[defaults]\nurl = "h:1"\n', 2, "unknown key 'url'"),
        ('[[endpoint]]\nurl = "h:1"\ninterval = 0\n', 3, "between 10ms and 1h"),
        # NaN and Infinity are legal TOML floats: refused, as are absurd values
        ('[[endpoint]]\nurl = "h:1"\ntimeout = nan\n', 3, "key 'timeout' must be a duration"),
        ('[defaults]\ninterval = inf\n', 2, "key 'interval' must be a duration"),
        ('[[endpoint]]\nurl = "h:1"\nfirst_token_timeout = -inf\n', 3, "first_token_timeout"),
        ('[[endpoint]]\nurl = "h:1"\nconnect_timeout = 1e300\n', 3, "connect_timeout"),
        ('[[endpoint]]\nurl = "h:1"\nmetrics_interval = true\n', 3, "metrics_interval"),
        # every table's keys are known ones
        ('[ui]\ntheme = "nord-ish"\nthem = "x"\n', 3, "[ui]: unknown key 'them'"),
        ('[engine]\n\nwindow = 60\nmax_sample = 10\n', 4, "[engine]: unknown key 'max_sample'"),
        ('[engine]\nwindow = nan\n', 2, "[engine]: key 'window' must be a duration between"),
        ('[ui]\nrefresh = "fast"\n', 2, "[ui]: key 'refresh' must be"),
        ('[engine]\ninclude_client_limited = 1\n', 2, "must be true or false"),
        # headers that would split the request or cannot be sent
        ('[[endpoint]]\nurl = "h:1"\nheaders = { X-A = "a\\r\\nX-Injected: 1" }\n', 3, "control character"),
        ('[[endpoint]]\nurl = "h:1"\nheaders = { X-A = "nul\\u0000" }\n', 3, "control character"),
        ('[[endpoint]]\nurl = "h:1"\nheaders = { X-A = "caf\u00e9 \u2603" }\n', 3, "outside Latin-1"),
        ('[[endpoint]]\nurl = "h:1"\nheaders = { "X A" = "b" }\n', 3, "not a valid HTTP field name"),
        ('[[endpoint]]\nurl = "h:1"\nmetrics_url = "ftp://h:1/metrics"\n', 3, "http:// or https://"),
        ('[[endpoint]]\nurl = "h:1"\nmetrics_url = "/metrics"\n', 3, "http:// or https://"),
        ('[[endpoint]]\nurl = "h:1"\nserver_kind = "vllm2"\n', 3, "vllm, sglang, tgi"),
        # [alerts] errors carry the line of the key at fault
        ('[alerts]\ngpu_mem_warning_pct = 85\ngpu_mem_warnign_pct = 90\n', 3, "unknown alert threshold"),
        ('[alerts]\n\ngpu_mem_warning_pct = 185\n', 3, "between 0 and 100"),
        ('[alerts]\nkv_saturation = nan\n', 2, "finite number"),
        ('[[endpoint]]\nurl = "h:1"\nheaders = { Authorization = "Bearer sk-123" }\n', 3, "api_key_env"),
        ('[[endpoint]]\nname = "a"\nurl = "h:1"\n[[endpoint]]\nname = "a"\nurl = "h:2"\n', 5, "used by two"),
        ('[endpointz]\nurl = "h:1"\n', 1, "unknown key 'endpointz'"),
    ],
)
def test_errors_name_the_line_and_the_key(tmp_path, text, line, words):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert words in message
    assert "sk-123" not in message


def test_toml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[endpoint]]\nurl = "h:1\n')
    with pytest.raises(ConfigError, match=r"line 2"):
        load_config_file(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config_file(tmp_path / "nope.toml")


def test_a_query_string_is_kept_and_a_secret_in_it_is_masked_where_shown():
    from lpxtop.engine.probe import endpoint_path
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.textsafe import scrub

    url = normalize_url("https://example.openai.azure.com/openai/v1?api-version=2024-10-21")
    assert url == "https://example.openai.azure.com/openai/v1?api-version=2024-10-21"
    config = EndpointConfig(name="azure", url=url)
    assert endpoint_path(config) == "https://example.openai.azure.com/openai/v1/chat/completions?api-version=2024-10-21"
    assert config.api_url("/models") == "https://example.openai.azure.com/openai/v1/models?api-version=2024-10-21"
    assert config.origin == "https://example.openai.azure.com"
    assert config.effective_metrics_url == "https://example.openai.azure.com/metrics"
    keyed = EndpointConfig(name="g", url=normalize_url("https://g.example/v1beta/openai?key=AIzaSecret123456"))
    assert keyed.api_url("/models").endswith("/models?key=AIzaSecret123456")  # sent as given
    assert "AIzaSecret123456" not in keyed.display_url and "AIzaSecret123456" not in str(keyed.to_json())
    assert scrub("echo: AIzaSecret123456") == "echo: ***"


def test_thousands_of_unnamed_endpoints_on_one_url_load_in_linear_time(tmp_path):
    import time

    path = tmp_path / "many.toml"
    path.write_text('[[endpoint]]\nurl = "127.0.0.1:8000"\n' * 5000 + '[[endpoint]]\nname = "127.0.0.1:8000#7"\nurl = "h:1"\n')
    began = time.perf_counter()
    cfg = load_config_file(path)
    took = time.perf_counter() - began
    names = [e.name for e in cfg.endpoints]
    assert len(set(names)) == 5001 and names[:2] == ["127.0.0.1:8000", "127.0.0.1:8000#2"]
    assert names.count("127.0.0.1:8000#7") == 1  # the name given further down is left to its owner
    # linear: ~0.1 s here; quadratic ~1 s, cubic ~hours. The bound is generous against a loaded machine.
    assert took < 5.0, took
    many = endpoints_from_urls(["127.0.0.1:8000"] * 5000)
    assert len({e.name for e in many}) == 5000
