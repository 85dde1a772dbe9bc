"""`--otlp`, `[otlp]` and the standard OTEL_* variables (lpxtop/otel/settings.py): when export is on, where
it goes, and that a header's value is a secret from the moment it is read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lpxtop import textsafe
from lpxtop.checks import ConfigError
from lpxtop.config import load_config_file
from lpxtop.otel.settings import (
    DEFAULT_ENDPOINT,
    OtlpSettings,
    check_otlp_table,
    parse_endpoint,
    parse_env_headers,
    parse_share,
    resolve,
)


def test_off_unless_asked_even_with_the_standard_variable_set():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert resolve(None, {}, environ=env) is None
    assert resolve(None, {"service_name": "x"}, environ=env) is None  # a table without endpoint or enabled
    assert resolve(None, {"endpoint": "http://c:4318", "enabled": False}, environ=env) is None


def test_the_url_comes_from_the_flag_then_the_table_then_the_variable_then_the_default():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318/"}
    assert resolve("http://flag:4318", {"endpoint": "http://table:4318"}, environ=env).endpoint == "http://flag:4318"
    assert resolve(None, {"endpoint": "http://table:4318"}, environ=env).endpoint == "http://table:4318"
    assert resolve(None, {"enabled": True}, environ=env).endpoint == "http://env:4318"
    assert resolve(None, {"enabled": True}, environ={}).endpoint == DEFAULT_ENDPOINT


def test_signal_urls_are_the_base_plus_v1_path_and_a_signal_path_given_is_dropped():
    s = OtlpSettings(endpoint=parse_endpoint("collector.example:4318/v1/traces"))
    assert s.endpoint == "http://collector.example:4318"
    assert (s.traces_url, s.metrics_url) == ("http://collector.example:4318/v1/traces",
                                              "http://collector.example:4318/v1/metrics")
    prefixed = OtlpSettings(endpoint=parse_endpoint("https://gw.example/otlp/"))
    assert prefixed.traces_url == "https://gw.example/otlp/v1/traces"


@pytest.mark.parametrize("url, problem", [
    ("", "empty"), ("grpc://c:4317", "http://"), ("http://user:pw@c:4318", "credentials"),
    ("http://c:99999", "port"), ("http://c:4318#x", "fragment"), ("http://:4318", "no host"),
])
def test_bad_urls_say_what_to_do(url, problem):
    with pytest.raises(ConfigError, match=problem):
        parse_endpoint(url)


def test_headers_from_the_variable_and_the_table_are_secrets_from_the_start():
    env = {"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20tok-env-123456,x-team=env-team-abcdef,broken"}
    s = resolve("http://c:4318", {"headers": {"X-Team": "table-team-abcdef"}}, environ=env)
    assert dict(s.headers) == {"authorization": "Bearer tok-env-123456", "x-team": "table-team-abcdef"}
    text = "sent tok-env-123456 and table-team-abcdef"
    assert textsafe.scrub(text) == "sent *** and ***"
    assert "tok-env" not in repr(s.display_endpoint)


def test_env_headers_parse_as_the_sdk_parses_them():
    from opentelemetry.util.re import parse_env_headers as sdk_parse

    for text in ("a=b,c=d%20e", "Key=v%2Cx ,  spaced = yes ", "novalue,=x,k=", "api-key=abc=def"):
        assert dict(parse_env_headers(text)) == sdk_parse(text, liberal=True), text


@pytest.mark.parametrize("text, share", [("1", 1.0), ("0", 0.0), ("0.05", 0.05), ("5%", 0.05), ("1/100", 0.01)])
def test_shares(text, share):
    assert parse_share(text, "x") == pytest.approx(share)


@pytest.mark.parametrize("text", ["2", "-1%", "nan", "1/0", "lots", True])
def test_bad_shares(text):
    with pytest.raises(ConfigError):
        parse_share(text, "x")


def test_the_sample_flag_sets_the_probes_share_or_with_load_the_load_share():
    s = resolve("http://c:4318", {"sample": 0.5, "load_sample": 0.2}, environ={}, sample=0.1)
    assert (s.probe_sample, s.load_sample) == (0.1, 0.2)
    s = resolve("http://c:4318", {"sample": 0.5}, environ={}, sample=0.1, load=True)
    assert (s.probe_sample, s.load_sample) == (0.5, 0.1)
    assert resolve("http://c:4318", {}, environ={}).load_sample == 0.01


def test_the_opt_in_variable_switches_to_the_newest_names():
    assert resolve("http://c:4318", environ={}).latest_names is False
    env = {"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"}
    assert resolve("http://c:4318", environ=env).latest_names is True


@pytest.mark.parametrize("table, key", [
    ({"endpont": "x"}, "endpont"), ({"interval": 0}, "interval"), ({"timeout": "ten"}, "timeout"),
    ({"sample": 1.5}, "sample"), ({"headers": {"a": 1}}, "headers"), ({"enabled": "yes"}, "enabled"),
])
def test_table_mistakes_name_the_key(table, key):
    problem = check_otlp_table(table)
    assert problem is not None and key in problem


def test_the_config_file_table_is_checked_with_its_line(tmp_path):
    path = tmp_path / "lpxtop.toml"
    path.write_text('[[endpoint]]\nurl = "127.0.0.1:8000"\n\n[otlp]\nendpoint = "http://c:4318"\nsample = 3\n')
    with pytest.raises(ConfigError, match=r"lpxtop.toml:6: \[otlp\]: key 'sample'"):
        load_config_file(path)
    path.write_text('[otlp]\nendpoint = "http://c:4318"\ninterval = 5\n')
    assert load_config_file(path).otlp == {"endpoint": "http://c:4318", "interval": 5}


def test_nothing_that_parses_the_flags_imports_opentelemetry():
    code = ("import sys, lpxtop.cli.entry, lpxtop.cli.otlp, lpxtop.otel.settings, lpxtop.cli.exporter, lpxtop.cli.record, "
            "lpxtop.cli.load; lpxtop.cli.entry.build_parser(None); lpxtop.cli.entry.build_parser('once'); "
            "bad = sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'google.protobuf', 'requests'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr[-500:]


def test_one_signal_can_be_left_out_but_not_both():
    s = resolve("http://c:4318", {"metrics": False}, environ={})
    assert (s.traces, s.metrics) == (True, False)
    s = resolve("http://c:4318", {}, environ={"OTEL_TRACES_EXPORTER": "none"})
    assert (s.traces, s.metrics) == (False, True)
    with pytest.raises(ConfigError, match="both traces and metrics"):
        resolve("http://c:4318", {"metrics": False}, environ={"OTEL_TRACES_EXPORTER": "none"})
