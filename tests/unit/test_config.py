"""Endpoint URLs and the TOML config file: accepted forms, and errors that name the line and the key."""

from __future__ import annotations

import pytest

from lpxtop.config import ConfigError, endpoints_from_urls, load_config_file, normalize_url


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
        ('[[endpoint]]\nurl = "h:1"\ninterval = 0\n', 3, "positive number"),
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
