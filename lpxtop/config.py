"""Endpoints from the command line and from a TOML file, validated with file:line errors."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from lpxtop.checks import ConfigError, check_http_url
from lpxtop.durations import DurationError, format_duration, parse_duration
from lpxtop.model.endpoint import PLATFORM_APIS, SECRET_PARAM, EndpointConfig
from lpxtop.model.server import SERVER_KINDS
from lpxtop.textsafe import register_secret

ENDPOINT_KEYS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    # file key: (EndpointConfig field, accepted TOML types)
    "name": ("name", str),
    "url": ("url", str),
    "model": ("model", str),
    "api": ("api", str),
    "api_key_env": ("api_key_env", str),
    "headers": ("headers", dict),
    "interval": ("interval_s", (int, float, str)),
    "max_tokens": ("max_tokens", int),
    "prompt": ("prompt", str),
    "random_prefix": ("random_prefix", bool),
    "timeout": ("timeout_s", (int, float, str)),
    "connect_timeout": ("connect_timeout_s", (int, float, str)),
    "first_token_timeout": ("first_token_timeout_s", (int, float, str)),
    "metrics_url": ("metrics_url", str),
    "metrics_interval": ("metrics_interval_s", (int, float, str)),
    "server_kind": ("server_kind", str),
    # the agent-step probe (lpxtop/engine/agent)
    "probe": ("probes", (str, list)),
    "tool_choice": ("tool_choice", str),
    "tools_file": ("tools_file", str),
    "tool_latency": ("tool_latency_s", (int, float, str)),
    "chain_steps": ("chain_steps", int),
    # agent platforms (lpxtop/engine/agent/coze.py, difyworkflow.py)
    "bot_id": ("bot_id", str),
    "inputs": ("inputs", dict),
}
TOP_LEVEL_TABLES = ("endpoint", "defaults", "alerts", "ui", "engine", "exporter", "record", "otlp", "traces")
API_KINDS = ("chat", "completions", *PLATFORM_APIS)
MAX_BOT_ID_CHARS = 128
MAX_INPUTS_BYTES = 1 << 20  # a workflow's inputs, as JSON
PROBE_KINDS = ("chat", "agent")
MAX_TOOL_LATENCY_S = 60.0
MAX_CHAIN_STEPS = 50


def parse_probes(value: str | Sequence[str]) -> tuple[str, ...]:
    """`"agent"`, `"chat,agent"` or `["chat", "agent"]` as a tuple of probe kinds; ValueError if unknown."""
    items = value.split(",") if isinstance(value, str) else list(value)
    probes: list[str] = []
    for item in items:
        if not isinstance(item, str) or item.strip() not in PROBE_KINDS:
            raise ValueError(f"{item!r} is not a probe kind (use \"chat\", \"agent\" or both)")
        if item.strip() not in probes:
            probes.append(item.strip())
    if not probes:
        raise ValueError("name at least one probe kind (\"chat\", \"agent\")")
    return tuple(probes)


def parse_duration_s(value: float | int | str) -> float:
    """A tool latency: seconds from a number or a text like `0ms`, `250ms`, `1.5s`; ValueError if not one."""
    try:
        return parse_duration(value, low=0.0, high=MAX_TOOL_LATENCY_S)
    except DurationError as exc:
        raise ValueError(f"a tool latency: {exc}") from None


def settle_agent_settings(config: EndpointConfig) -> EndpointConfig:
    """An agent platform (a Dify app or workflow, a Coze bot) is probed by agent steps alone, a Coze bot needs
    its bot id; an agent probe's tools file and tool_choice must work.

    Raises ValueError with what to do. The tools file is read here so a mistake stops the start.
    """
    if config.is_platform:
        if "chat" in config.probes and config.probes != ("chat",):
            raise ValueError(f"api \"{config.api}\" probes {_PLATFORM_NAMES[config.api]} with agent steps only: "
                             "drop \"chat\" from probe")
        config = replace(config, probes=("agent",))
        if config.api == "coze" and not config.bot_id:
            raise ValueError("api \"coze\" needs the bot to probe: --bot-id ID (bot_id = \"...\" in the config "
                             "file; the number at the end of the bot's URL in Coze)")
    check_bot_id(config.bot_id)
    if "agent" not in config.probes:
        return config
    from lpxtop.engine.agent import check_tool_choice, load_tool_set

    tools = load_tool_set(config.tools_file)
    if not config.is_platform:
        check_tool_choice(config.tool_choice, tools)
    if not 1 <= config.chain_steps <= MAX_CHAIN_STEPS:
        raise ValueError(f"chain_steps must be between 1 and {MAX_CHAIN_STEPS}, got {config.chain_steps}")
    return config

_PLATFORM_NAMES = {"dify": "a Dify app", "dify-workflow": "a Dify workflow", "coze": "a Coze bot"}


def check_bot_id(bot_id: str | None) -> None:
    """A Coze bot id: printable, without spaces, at most MAX_BOT_ID_CHARS characters; ValueError if not."""
    if bot_id is None:
        return
    if not bot_id or len(bot_id) > MAX_BOT_ID_CHARS or not bot_id.isprintable() or any(c.isspace() for c in bot_id):
        raise ValueError(f"a bot id is up to {MAX_BOT_ID_CHARS} printable characters without spaces "
                         "(the number at the end of the bot's URL in Coze)")


def workflow_inputs(value: object, where: str) -> tuple[tuple[str, object], ...]:
    """A Dify workflow's inputs (a table, or a JSON object from --inputs-file) as the endpoint keeps them:
    names to JSON values, no deeper than 64 levels, at most 1 MiB as JSON. ValueError saying what is wrong."""
    import json

    from lpxtop.engine.agent import deeper_than

    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object of the workflow's input names and values")
    if deeper_than(value):
        raise ValueError(f"{where} nests deeper than 64 levels")
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: a value is not JSON ({exc}); use strings, numbers, booleans, lists and "
                         "tables") from None
    if len(text.encode()) > MAX_INPUTS_BYTES:
        raise ValueError(f"{where} is larger than {MAX_INPUTS_BYTES} bytes as JSON")
    return tuple(json.loads(text).items())


def read_inputs_file(path: str) -> tuple[tuple[str, object], ...]:
    """--inputs-file: a JSON object of a Dify workflow's inputs. ConfigError saying what is wrong."""
    import json

    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_INPUTS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"--inputs-file {path}: cannot read it: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUTS_BYTES:
        raise ConfigError(f"--inputs-file {path}: larger than {MAX_INPUTS_BYTES} bytes")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"--inputs-file {path}: not JSON ({exc})") from None
    try:
        return workflow_inputs(value, f"--inputs-file {path}")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# Seconds: every number of seconds a user gives (file or flag) must be finite and in this range. NaN
# or Infinity would pass a "> 0" test and then fail every probe; 1e300 would wait forever.
MIN_SECONDS = 0.01
MAX_SECONDS = 3600.0
SECONDS_KEYS = ("interval", "timeout", "connect_timeout", "first_token_timeout", "metrics_interval")

# The settings of the [ui] and [engine] tables: key -> (accepted TOML types, check or None). A key not
# listed is an error with its line, so a misspelling is never silently ignored. Modules that add a
# setting add its key here.
UI_KEYS: dict[str, tuple[type | tuple[type, ...], tuple[float, float] | None]] = {
    "theme": (str, None),
    "refresh": ((int, float, str), (0.1, 60.0)),  # screen refresh period: a duration
}
ENGINE_KEYS: dict[str, tuple[type | tuple[type, ...], tuple[float, float] | None]] = {
    "window": ((int, float, str), (1.0, 86_400.0)),  # the rolling window: a duration
    "max_samples": (int, (1, 100_000)),
    "include_client_limited": (bool, None),  # count client_limited probes in the percentiles
}
SETTINGS_TABLES = {"ui": UI_KEYS, "engine": ENGINE_KEYS}
# Settings that take a duration ("30s", "5m" or seconds): read with lpxtop.durations, kept as seconds.
DURATION_SETTINGS = {"refresh", "window"}

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_env_name(text: str) -> bool:
    """True when `text` can be an environment variable's name (letters, digits, _; not a digit first)."""
    return bool(_ENV_NAME.match(text))


# RFC 9110 field names are tokens; values may not hold CR, LF or NUL (they would split the request:
# header injection) nor anything outside Latin-1 (they cannot be sent).
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HEADER_VALUE_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_seconds(value: object, what: str) -> float:
    """`value` as seconds (a number, or a duration such as "30s", "2m"), or a ConfigError saying why not
    (NaN, Infinity, out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{what} must be a duration (30s, 2m, or a number of seconds), got {value!r}")
    try:
        return parse_duration(value, low=MIN_SECONDS, high=MAX_SECONDS)
    except DurationError:
        raise ConfigError(f"{what} must be a duration between {format_duration(MIN_SECONDS)} and "
                          f"{format_duration(MAX_SECONDS)} (30s, 2m, or a number of seconds), got {value!r}") from None


def check_header(name: object, value: object) -> None:
    """Refuse a header that cannot be sent as is, or that would inject others."""
    if not isinstance(name, str) or not _HEADER_NAME.match(name):
        raise ConfigError(f"header name {name!r} is not a valid HTTP field name (letters, digits and !#$%&'*+.^_`|~-)")
    if not isinstance(value, str):
        raise ConfigError(f"header {name!r} must be a string")
    if _HEADER_VALUE_BAD.search(value):
        raise ConfigError(f"header {name!r}: its value holds a control character (CR, LF, NUL ...), which would "
                          "split the request")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise ConfigError(f"header {name!r}: its value holds characters outside Latin-1, which HTTP/1.1 cannot "
                          "send; percent-encode them") from None


@dataclass
class FileConfig:
    """What a config file holds besides endpoints: tables the CLI hands to other parts."""

    endpoints: list[EndpointConfig] = field(default_factory=list)
    alerts: dict = field(default_factory=dict)
    ui: dict = field(default_factory=dict)
    engine: dict = field(default_factory=dict)
    exporter: dict = field(default_factory=dict)  # read by lpxtop.export.settings
    record: dict = field(default_factory=dict)  # `record = true`, or the [record] table (lpxtop/record/settings.py)
    otlp: dict = field(default_factory=dict)  # OpenTelemetry export, read by lpxtop.otel.settings
    traces: dict = field(default_factory=dict)  # the [traces] table (lpxtop/engine/traces/settings.py)


def normalize_url(text: str, *, register: bool = True) -> str:
    """Accept ``host:port``, ``http://host:port`` and ``http://host:port/v1``; return the API base URL.

    A credential-looking query value is registered for masking in all of lpxtop's output, unless
    `register` is False: for URLs a stranger sends (the exporter's `/probe?target=`), who must not
    choose what lpxtop masks, nor grow the registry without bound."""
    raw = text.strip()
    if not raw:
        raise ConfigError("an empty endpoint URL")
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{text!r}: only http:// and https:// endpoints are supported")
    if not parts.hostname:
        raise ConfigError(f"{text!r}: no host in this URL (try 127.0.0.1:8000)")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise ConfigError(f"{text!r}: the port is not a number between 0 and 65535") from None
    if parts.username or parts.password:
        raise ConfigError(f"{text!r}: credentials in the URL are not supported; use api_key_env")
    if parts.fragment:
        raise ConfigError(f"{text!r}: a URL fragment (#...) is never sent; remove it")
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if not path:
        path = "/v1"
    # A query (Azure's ?api-version=...) is kept and sent with every request to the endpoint.
    query = f"?{parts.query}" if parts.query else ""
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if register and SECRET_PARAM.search(name):  # masked wherever it would be shown
            register_secret(value)
    return f"{parts.scheme}://{parts.netloc}{path}{query}"


def endpoint_name(url: str, taken: Iterable[str] = ()) -> str:
    """`host:port` of the URL, with `#2`, `#3` ... when that name is taken."""
    names = _Names(taken)
    return names.unique(urlsplit(url).netloc)


class _Names:
    """Unique names in constant time each: thousands of endpoints on one URL load in linear time
    (a list scanned for every candidate suffix made that cubic)."""

    def __init__(self, taken: Iterable[str] = ()) -> None:
        self.taken = set(taken)
        self._next: dict[str, int] = {}

    def unique(self, base: str) -> str:
        name, n = base, self._next.get(base, 2)
        while name in self.taken:
            name = f"{base}#{n}"
            n += 1
        self._next[base] = n
        self.taken.add(name)
        return name


def endpoints_from_urls(urls: Sequence[str], **overrides: object) -> list[EndpointConfig]:
    """EndpointConfigs for URLs given on the command line, with flag overrides applied."""
    configs: list[EndpointConfig] = []
    names = _Names()
    for text in urls:
        url = normalize_url(text)
        config = EndpointConfig(name=names.unique(urlsplit(url).netloc), url=url)
        configs.append(apply_overrides(config, overrides))
    return configs


def apply_overrides(config: EndpointConfig, overrides: Mapping[str, object]) -> EndpointConfig:
    values = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, **values) if values else config


def load_config_file(path: str | Path) -> FileConfig:
    """Read a TOML config; every mistake is a ConfigError naming the file, the line and the key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    locate = _Locator(path, text)
    for key in data:
        if key not in TOP_LEVEL_TABLES:
            raise ConfigError(
                f"{locate(None, None, key)}: unknown key {key!r} (expected one of: {', '.join(TOP_LEVEL_TABLES)})"
            )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError(f"{locate(None, None, 'defaults')}: 'defaults' must be a table ([defaults])")
    raw_endpoints = data.get("endpoint", [])
    if not isinstance(raw_endpoints, list):
        raise ConfigError(f"{locate(None, None, 'endpoint')}: write endpoints as [[endpoint]] tables")
    base = _endpoint_fields(defaults, lambda key: locate("defaults", None, key), allow_identity=False)
    endpoints: list[EndpointConfig] = []
    names = _Names()
    named: set[str] = set()
    given = {t.get("name") for t in raw_endpoints if isinstance(t, dict) and isinstance(t.get("name"), str)}
    for index, table in enumerate(raw_endpoints):
        where = lambda key, i=index: locate("endpoint", i, key)  # noqa: E731
        values = {**base, **_endpoint_fields(table, where, allow_identity=True)}
        if "url" not in values:
            raise ConfigError(f"{where(None)}: endpoint #{index + 1} has no 'url'")
        try:
            values["url"] = normalize_url(values["url"])
        except ConfigError as exc:
            raise ConfigError(f"{where('url')}: key 'url': {exc}") from None
        name = values.get("name")
        if name is None:  # not a name another endpoint gives itself further down
            name = names.unique(urlsplit(values["url"]).netloc)
            while name in given:
                name = names.unique(urlsplit(values["url"]).netloc)
        elif name in named:
            raise ConfigError(f"{where('name')}: key 'name': {name!r} is used by two endpoints")
        named.add(name)
        values["name"] = name
        tools_file = values.get("tools_file")
        if tools_file and not Path(tools_file).is_absolute():
            values["tools_file"] = str(path.parent / tools_file)  # relative to the config file
        try:
            config = settle_agent_settings(EndpointConfig(**values))
        except ValueError as exc:
            key = next((k for k in ("tools_file", "tool_choice", "probe", "bot_id", "api") if k in table), None)
            raise ConfigError(f"{where(key)}: {exc}") from None
        endpoints.append(config)
    sections = {}
    for table in ("alerts", "ui", "engine", "exporter"):
        value = data.get(table, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{locate(None, None, table)}: '{table}' must be a table ([{table}])")
        if table in SETTINGS_TABLES:
            _check_settings(table, value, locate)
        sections[table] = value
    sections["record"] = _record_section(data.get("record", {}), locate)
    sections["otlp"] = _otlp_section(data.get("otlp", {}), locate)
    sections["traces"] = _traces_section(data.get("traces", {}), locate)
    _check_alerts(sections["alerts"], locate)
    return FileConfig(endpoints=endpoints, **sections)


def _record_section(value: object, locate: _Locator) -> dict:
    """`record = true` (top level) or a `[record]` table, checked by lpxtop.record.settings."""
    if isinstance(value, bool):
        return {"enabled": value}
    if not isinstance(value, dict):
        raise ConfigError(f"{locate(None, None, 'record')}: 'record' must be true/false or a table ([record])")
    from lpxtop.record.settings import check_record_table

    return _checked_table("record", value, locate, check_record_table)


def _checked_table(name: str, value: object, locate: _Locator, check: Callable[[dict], str | None]) -> dict:
    """The `[name]` table, as `check` (its own settings module's) finds it; the key it names is located."""
    if not isinstance(value, dict):
        raise ConfigError(f"{locate(None, None, name)}: '{name}' must be a table ([{name}])")
    problem = check(value)
    if problem is not None:
        key = problem.split("'")[1] if "'" in problem else None
        raise ConfigError(f"{locate(name, None, key)}: [{name}]: {problem}")
    return dict(value)


def _otlp_section(value: object, locate: _Locator) -> dict:
    """The `[otlp]` table, checked by lpxtop.otel.settings (which imports no OpenTelemetry package)."""
    from lpxtop.otel.settings import check_otlp_table

    return _checked_table("otlp", value, locate, check_otlp_table)


def _traces_section(value: object, locate: _Locator) -> dict:
    """The `[traces]` table (the OTLP receiver), checked by lpxtop.engine.traces.settings."""
    from lpxtop.engine.traces import check_traces_table

    return _checked_table("traces", value, locate, check_traces_table)


def _check_settings(table: str, values: dict, locate: _Locator) -> None:
    known = SETTINGS_TABLES[table]
    for key, value in list(values.items()):
        where = locate(table, None, key)
        if key not in known:
            raise ConfigError(f"{where}: [{table}]: unknown key {key!r} (known keys: {', '.join(known)})")
        types, limits = known[key]
        if key in DURATION_SETTINGS and limits is not None and not isinstance(value, bool):
            try:
                values[key] = parse_duration(value, low=limits[0], high=limits[1])  # type: ignore[arg-type]
            except DurationError:
                raise ConfigError(f"{where}: [{table}]: key {key!r} must be a duration between "
                                  f"{format_duration(limits[0])} and {format_duration(limits[1])}, got {value!r}") from None
            continue
        if isinstance(value, bool) != (types is bool) or not isinstance(value, types):
            raise ConfigError(f"{where}: [{table}]: key {key!r} must be {_type_name(types)}, got {value!r}")
        if limits is not None and not (math.isfinite(value) and limits[0] <= value <= limits[1]):
            raise ConfigError(f"{where}: [{table}]: key {key!r} must be between {limits[0]:g} and {limits[1]:g}, "
                              f"got {value!r}")


def _check_alerts(values: dict, locate: _Locator) -> None:
    """[alerts] through the alert rules' own validation; the error names the line of the key at fault."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{locate('alerts', None, key)}: [alerts]: key {key!r} must be a finite number, "
                              f"got {value!r}")
    from lpxtop.engine import AlertThresholds  # headless; imported only when a file is read

    try:
        AlertThresholds.from_mapping(values)
    except ValueError as exc:
        named = [k for k in re.findall(r"'([\w-]+)'", str(exc)) if k in values or k.replace("_", "-") in values]
        key = named[0] if named else None
        if key is not None and key not in values:
            key = key.replace("_", "-")
        raise ConfigError(f"{locate('alerts', None, key)}: [alerts]: {exc}") from None


def _endpoint_fields(table: object, where, *, allow_identity: bool) -> dict:
    if not isinstance(table, dict):
        raise ConfigError(f"{where(None)}: expected a table")
    values: dict = {}
    for key, value in table.items():
        if key not in ENDPOINT_KEYS or (not allow_identity and key in ("name", "url")):
            known = ", ".join(k for k in ENDPOINT_KEYS if allow_identity or k not in ("name", "url"))
            raise ConfigError(f"{where(key)}: unknown key {key!r} (known keys: {known})")
        attr, types = ENDPOINT_KEYS[key]
        if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise ConfigError(f"{where(key)}: key {key!r} must be {_type_name(types)}, not a boolean")
        if not isinstance(value, types):
            raise ConfigError(f"{where(key)}: key {key!r} must be {_type_name(types)}, got {value!r}")
        if key == "api_key_env" and not is_env_name(value):
            raise ConfigError(f"{where(key)}: key 'api_key_env' takes the NAME of an environment variable that holds "
                              "the key (such as \"OPENAI_API_KEY\"); this value is not a variable name (not shown: it "
                              "may be the key itself)")
        if key == "api" and value not in API_KINDS:
            raise ConfigError(f"{where(key)}: key 'api' must be one of {', '.join(map(json_quote, API_KINDS))}, "
                              f"got {value!r}")
        if key == "bot_id":
            try:
                check_bot_id(value)
            except ValueError as exc:
                raise ConfigError(f"{where(key)}: key 'bot_id': {exc}") from None
        if key == "inputs":
            try:
                value = workflow_inputs(value, "key 'inputs'")
            except ValueError as exc:
                raise ConfigError(f"{where(key)}: {exc}") from None
        if key == "probe":
            try:
                value = parse_probes(value)
            except ValueError as exc:
                raise ConfigError(f"{where(key)}: key 'probe': {exc}") from None
        if key == "tool_latency":
            try:
                value = parse_duration_s(value)
            except ValueError as exc:
                raise ConfigError(f"{where(key)}: key 'tool_latency': {exc}") from None
        if key == "chain_steps" and not 1 <= value <= MAX_CHAIN_STEPS:
            raise ConfigError(f"{where(key)}: key 'chain_steps' must be between 1 and {MAX_CHAIN_STEPS}, got {value!r}")
        if key in SECONDS_KEYS:
            try:
                value = check_seconds(value, f"key {key!r}")
            except ConfigError as exc:
                raise ConfigError(f"{where(key)}: {exc}") from None
        if key == "max_tokens" and not 1 <= value <= 100_000:
            raise ConfigError(f"{where(key)}: key 'max_tokens' must be between 1 and 100000, got {value!r}")
        if key == "server_kind" and value not in SERVER_KINDS:
            raise ConfigError(f"{where(key)}: key 'server_kind' must be one of {', '.join(SERVER_KINDS)}, got {value!r}")
        if key == "headers":
            for name, header_value in value.items():
                try:
                    check_header(name, header_value)
                except ConfigError as exc:
                    raise ConfigError(f"{where(key)}: key 'headers': {exc}") from None
            if any(k.lower() == "authorization" for k in value):
                raise ConfigError(
                    f"{where(key)}: key 'headers': put the API key in an environment variable and name it with "
                    "api_key_env instead of writing an Authorization header into the file"
                )
            value = tuple(sorted(value.items()))
        elif key == "metrics_url":
            try:
                value = check_http_url(value, "key 'metrics_url':")
            except ConfigError as exc:
                raise ConfigError(f"{where(key)}: {exc}") from None
        values[attr] = value
    return values


def json_quote(text: str) -> str:
    return f'"{text}"'


def _type_name(types: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table",
             list: "a list"}
    if isinstance(types, tuple):
        return " or ".join(dict.fromkeys(names[t] for t in types))
    return names[types]


class _Locator:
    """Find the line of a key inside the n-th [[endpoint]] (or a [table]) of the raw TOML text."""

    _header = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\"-]+)\s*\]\]?")
    _key = re.compile(r"^\s*\"?([A-Za-z0-9_-]+)\"?\s*=")

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def __call__(self, table: str | None, index: int | None, key: str | None) -> str:
        line = self._find(table, index, key)
        return f"{self.path}:{line}" if line else str(self.path)

    def _find(self, table: str | None, index: int | None, key: str | None) -> int | None:
        current: str | None = None
        count = -1
        table_line = None
        for number, line in enumerate(self.lines, start=1):
            header = self._header.match(line)
            if header:
                current = header.group(2).strip('"')
                if current == table:
                    count += 1
                    if index is None or count == index:
                        table_line = number
                if table is None and key is not None and current == key:
                    return number
                continue
            in_target = current == table and (index is None or count == index)
            if key is not None and in_target:
                found = self._key.match(line)
                if found and found.group(1) == key:
                    return number
        return table_line
