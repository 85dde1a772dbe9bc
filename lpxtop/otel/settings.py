"""Where and how lpxtop sends OpenTelemetry: `--otlp URL`, the config file's `[otlp]` table, and the
standard variables. Nothing here imports OpenTelemetry (the CLI checks its flags before anything loads).

```toml
[otlp]
endpoint = "http://127.0.0.1:4318"   # OTLP/HTTP base: spans go to /v1/traces, metrics to /v1/metrics
headers = { "x-api-key" = "..." }    # sent with every export; values are never shown, logged or recorded
service_name = "lpxtop-gpu-node-3"   # default: $OTEL_SERVICE_NAME, else "lpxtop"
interval = "10s"                    # time between exports (metrics and spans)
timeout = "10s"                     # how long one export may take, its retries included
sample = 1.0                         # share of probes and agent steps traced (metrics always take every one)
load_sample = 0.01                   # share of `lpxtop load` requests traced
traces = true                        # false: no spans (OTEL_TRACES_EXPORTER=none does the same)
metrics = true                       # false: no metrics (OTEL_METRICS_EXPORTER=none), e.g. for Jaeger alone
```

Export is on when `--otlp URL` is given or the file has an `[otlp]` table with an `endpoint` (or
`enabled = true`). The URL comes from the flag, else the table, else `OTEL_EXPORTER_OTLP_ENDPOINT`, else
`http://localhost:4318`. lpxtop never starts exporting only because
that variable is set: a tool that starts sending by itself on a shared server sends what no one asked for.
`OTEL_EXPORTER_OTLP_HEADERS` adds headers (the table's win), `OTEL_SERVICE_NAME` and
`OTEL_RESOURCE_ATTRIBUTES` name the resource, `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`
switches to the GenAI conventions' newest names (lpxtop/otel/semconv.py), `OTEL_TRACES_EXPORTER=none` or
`OTEL_METRICS_EXPORTER=none` leaves one signal out (a backend that takes only spans, as Jaeger).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from lpxtop.checks import ConfigError
from lpxtop.durations import DurationError, parse_duration
from lpxtop.model.endpoint import SECRET_PARAM
from lpxtop.textsafe import MASK, register_credential, register_secret

DEFAULT_ENDPOINT = "http://localhost:4318"  # the OTLP/HTTP default port, as the SDK's
DEFAULT_INTERVAL_S = 10.0  # the SDK's 60 s is too slow for a live tool
DEFAULT_TIMEOUT_S = 10.0  # the SDK's own default for one export
DEFAULT_PROBE_SAMPLE = 1.0
DEFAULT_LOAD_SAMPLE = 0.01  # docs/opentelemetry.md says why
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.1, 3600.0
MIN_TIMEOUT_S, MAX_TIMEOUT_S = 0.1, 120.0
MAX_HEADERS = 32
OPT_IN_VAR = "OTEL_SEMCONV_STABILITY_OPT_IN"
OPT_IN_LATEST = "gen_ai_latest_experimental"

OTLP_KEYS = ("enabled", "endpoint", "headers", "service_name", "interval", "timeout", "sample", "load_sample",
             "traces", "metrics")


@dataclass(frozen=True)
class OtlpSettings:
    """Everything the pipeline needs besides the engine."""

    endpoint: str = DEFAULT_ENDPOINT  # the OTLP/HTTP base URL, without /v1/...
    headers: tuple[tuple[str, str], ...] = ()
    service_name: str | None = None  # None: $OTEL_SERVICE_NAME, else "lpxtop"
    interval_s: float = DEFAULT_INTERVAL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    probe_sample: float = DEFAULT_PROBE_SAMPLE
    load_sample: float = DEFAULT_LOAD_SAMPLE
    latest_names: bool = False  # OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental
    traces: bool = True  # send spans (off: OTEL_TRACES_EXPORTER=none or [otlp] traces = false)
    metrics: bool = True  # send metrics (off: OTEL_METRICS_EXPORTER=none or [otlp] metrics = false)

    @property
    def traces_url(self) -> str:
        return _signal_url(self.endpoint, "traces")

    @property
    def metrics_url(self) -> str:
        return _signal_url(self.endpoint, "metrics")

    @property
    def display_endpoint(self) -> str:
        """The endpoint as it may be shown: credential-like query values masked (headers are never shown)."""
        base, _, query = self.endpoint.partition("?")
        if not query:
            return base
        pairs = [(k, MASK if SECRET_PARAM.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)]
        return f"{base}?{urlencode(pairs, safe='*')}"

    @property
    def header_dict(self) -> dict[str, str]:
        return dict(self.headers)


def _signal_url(base: str, signal: str) -> str:
    root, sep, query = base.partition("?")
    return f"{root.rstrip('/')}/v1/{signal}{sep}{query}"


def parse_endpoint(text: str, what: str = "--otlp") -> str:
    """An OTLP/HTTP base URL: `http(s)://host:port[/prefix]`; a trailing /v1/traces or /v1/metrics is dropped
    (both signals are sent). ConfigError says what is wrong."""
    raw = text.strip()
    if not raw:
        raise ConfigError(f"{what}: an empty URL (try http://127.0.0.1:4318)")
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{what} {text!r}: OTLP/HTTP needs an http:// or https:// URL (gRPC on :4317 is not "
                          "supported: use the Collector's HTTP port, 4318)")
    if not parts.hostname:
        raise ConfigError(f"{what} {text!r}: no host in this URL (try http://127.0.0.1:4318)")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ConfigError(f"{what} {text!r}: the port is not a number between 0 and 65535") from None
    if parts.username or parts.password:
        raise ConfigError(f"{what} {text!r}: credentials in the URL are not supported; send them as a header "
                          "(OTEL_EXPORTER_OTLP_HEADERS or [otlp] headers)")
    if parts.fragment:
        raise ConfigError(f"{what} {text!r}: a URL fragment (#...) is never sent; remove it")
    path = parts.path.rstrip("/")
    for suffix in ("/v1/traces", "/v1/metrics"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if SECRET_PARAM.search(name):
            register_secret(value)
    return f"{parts.scheme}://{parts.netloc}{path}" + (f"?{parts.query}" if parts.query else "")


def parse_share(value: object, what: str) -> float:
    """A share between 0 and 1: a number, or a text like `0.05`, `5%` or `1/100`."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not a share (try 0.01 or 1%)")
    if isinstance(value, int | float):
        share = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if text.endswith("%"):
                share = float(text[:-1]) / 100.0
            elif "/" in text:
                num, _, den = text.partition("/")
                share = float(num) / float(den)
            else:
                share = float(text)
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"{what}: {value!r} is not a share (try 0.01, 1% or 1/100)") from None
    else:
        raise ConfigError(f"{what}: {value!r} is not a share (try 0.01 or 1%)")
    if not math.isfinite(share) or not 0.0 <= share <= 1.0:
        raise ConfigError(f"{what}: {value!r} must be between 0 and 1 (0 % and 100 %)")
    return share


def parse_env_headers(text: str) -> list[tuple[str, str]]:
    """`OTEL_EXPORTER_OTLP_HEADERS`: `key1=value1,key2=value2`, values percent-encoded (the W3C baggage
    format the OTLP exporter specification names). Entries without `=` are skipped, as the SDK does."""
    headers: list[tuple[str, str]] = []
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = unquote(name).strip().lower()
        if not sep or not name:
            continue
        headers.append((name, unquote(value).strip()))
    return headers


def latest_names_opted_in(environ: Mapping[str, str]) -> bool:
    """`OTEL_SEMCONV_STABILITY_OPT_IN` is a comma-separated list; `gen_ai_latest_experimental` in it."""
    return OPT_IN_LATEST in {v.strip() for v in environ.get(OPT_IN_VAR, "").split(",")}


def check_otlp_table(table: Mapping[str, object]) -> str | None:
    """The config file's `[otlp]` table: None when it is right, else what is wrong (naming the key)."""
    try:
        _table_values(table)
    except ConfigError as exc:
        return str(exc)
    return None


def _seconds(value: object, key: str, low: float, high: float) -> float:
    try:
        return parse_duration(value, low=low, high=high)  # type: ignore[arg-type]
    except DurationError as exc:
        raise ConfigError(f"key '{key}': {exc}") from None


def _table_values(table: Mapping[str, object]) -> dict:
    values: dict = {}
    for key, value in table.items():
        if key not in OTLP_KEYS:
            raise ConfigError(f"unknown key {key!r} (known keys: {', '.join(OTLP_KEYS)})")
        if key in ("enabled", "traces", "metrics"):
            if not isinstance(value, bool):
                raise ConfigError(f"key '{key}' must be true or false")
            values[key] = value
        elif key == "endpoint":
            if not isinstance(value, str):
                raise ConfigError("key 'endpoint' must be a string like \"http://127.0.0.1:4318\"")
            values["endpoint"] = parse_endpoint(value, "key 'endpoint'")
        elif key == "headers":
            if not isinstance(value, dict) or len(value) > MAX_HEADERS or \
                    not all(isinstance(k, str) and k.strip() and isinstance(v, str) for k, v in value.items()):
                raise ConfigError(f"key 'headers' must be a table of strings (at most {MAX_HEADERS}), "
                                  "e.g. { \"x-api-key\" = \"...\" }")
            values["headers"] = [(k.strip().lower(), v) for k, v in value.items()]
        elif key == "service_name":
            if not isinstance(value, str) or not value.strip():
                raise ConfigError("key 'service_name' must be a non-empty string")
            values["service_name"] = value.strip()
        elif key == "interval":
            values["interval_s"] = _seconds(value, key, MIN_INTERVAL_S, MAX_INTERVAL_S)
        elif key == "timeout":
            values["timeout_s"] = _seconds(value, key, MIN_TIMEOUT_S, MAX_TIMEOUT_S)
        elif key == "sample":
            values["probe_sample"] = parse_share(value, "key 'sample'")
        elif key == "load_sample":
            values["load_sample"] = parse_share(value, "key 'load_sample'")
    return values


def resolve(
    flag: str | None,
    table: Mapping[str, object] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    sample: float | None = None,
    interval_s: float | None = None,
    load: bool = False,
    where: str = "[otlp]",
) -> OtlpSettings | None:
    """The settings when export is on, None when it is off.

    `flag` is `--otlp`'s value: None (not given) or the URL. `sample` is
    `--otlp-sample`: the share of probes traced, or of load requests with `load`. Every header value is
    registered as a secret (lpxtop/textsafe.py) before anything could show it.
    """
    environ = os.environ if environ is None else environ
    try:
        values = _table_values(table or {})
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    enabled = values.pop("enabled", None)
    if flag is None and not (enabled or (enabled is None and "endpoint" in values)):
        return None
    if flag:
        values["endpoint"] = parse_endpoint(flag)
    elif "endpoint" not in values:
        env = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        values["endpoint"] = parse_endpoint(env, "OTEL_EXPORTER_OTLP_ENDPOINT") if env else DEFAULT_ENDPOINT
    headers = dict(parse_env_headers(environ.get("OTEL_EXPORTER_OTLP_HEADERS", "")))
    headers.update(values.pop("headers", []))
    for value in headers.values():
        register_credential(value)  # every value: a collector's key travels in headers of any name
    values["headers"] = tuple(headers.items())[:MAX_HEADERS]
    if sample is not None:
        values["load_sample" if load else "probe_sample"] = sample
    if interval_s is not None:
        values["interval_s"] = interval_s
    values["latest_names"] = latest_names_opted_in(environ)
    for signal in ("traces", "metrics"):
        if environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower() == "none":
            values[signal] = False
    if not values.get("traces", True) and not values.get("metrics", True):
        raise ConfigError(f"{where}: both traces and metrics are turned off (OTEL_TRACES_EXPORTER / "
                          "OTEL_METRICS_EXPORTER = none, or traces/metrics = false): drop --otlp instead")
    return OtlpSettings(**values)
