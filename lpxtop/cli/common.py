"""What the subcommands' command lines share: argparse types (numbers, durations), the endpoint, alert,
display and recording flags, endpoints from the flags and the config file, and the engine built from them
(the OpenTelemetry flags are lpxtop/cli/otlp.py's).

Imports no Textual (the UI is imported only by the modules that open it, inside the functions that do),
and no OpenTelemetry package.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from collections import deque
from collections.abc import Callable, Iterator

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import env_name
from lpxtop.config import (
    MAX_SECONDS,
    MIN_SECONDS,
    FileConfig,
    apply_overrides,
    endpoints_from_urls,
    load_config_file,
    parse_duration_s,
    parse_probes,
    read_inputs_file,
    settle_agent_settings,
)
from lpxtop.durations import DurationError, parse_duration

# The interpreter's switch interval while lpxtop measures (the dashboard, once, load): a thread that wakes
# with bytes to stamp waits ~1 ms for the interpreter lock, not 5.
SWITCH_INTERVAL_S = 0.001


# ---- argparse types ----

def number_between(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number between `low` and `high` (NaN, Infinity and 1e300 are usage errors)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be a number between {low:g} and {high:g}")
        return value

    return parse


def duration_between(low: float, high: float, *, bare_unit: float = 1.0) -> Callable[[str], float]:
    """An argparse type: a duration (`500ms`, `30s`, `2m`, `1h` or a plain number in `bare_unit` seconds)
    between `low` and `high` seconds, as lpxtop.durations reads it; in seconds."""

    def parse(text: str) -> float:
        try:
            return parse_duration(text, low=low, high=high, bare_unit=bare_unit)
        except DurationError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


# a duration within lpxtop's bounds for seconds (a timeout, an interval)
seconds = duration_between(MIN_SECONDS, MAX_SECONDS)
finite_number = number_between(-1e12, 1e12)


def positive_float(text: str) -> float:
    """An argparse type: a finite number greater than 0 (and below 1e12: NaN, Infinity and 1e300 are usage errors)."""
    value = number_between(0.0, 1e12)(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number from 1 to 1,000,000."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 < value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number between 1 and 1000000")
    return value


def probe_kinds(text: str) -> tuple[str, ...]:
    """An argparse type: `chat`, `agent` or `chat,agent`."""
    try:
        return parse_probes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def tool_latency(text: str) -> float:
    """An argparse type: how long the agent step's tool takes (`0ms`, `250ms`, `1.5s`), in seconds."""
    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def chain_steps(text: str) -> int:
    """An argparse type: the steps of an agent chain, 1 to 50."""
    value = positive_int(text)
    if value > 50:
        raise argparse.ArgumentTypeError(f"{text!r}: at most 50 steps")
    return value


# ---- flag groups ----

def add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    """The endpoints (URLs, --config) and how each is probed; the statistics and the alert thresholds."""
    g = parser.add_argument_group("probing")
    g.add_argument("urls", nargs="*", metavar="URL",
                   help="OpenAI-compatible endpoint: http://host:port/v1, http://host:port or host:port")
    g.add_argument("-c", "--config", metavar="FILE", help="read endpoints (and alert, UI settings) from a TOML file")
    g.add_argument("-m", "--model", help="model to request (default: the first one /v1/models lists)")
    g.add_argument("--api", choices=("chat", "completions", "dify", "dify-workflow", "coze"), metavar="API",
                   help="chat (default), completions; agent platforms: dify, dify-workflow, coze")
    g.add_argument("--api-key-env", type=env_name, metavar="VAR",
                   help="environment variable that holds the API key (the key itself is never shown or saved)")
    g.add_argument("-i", "--interval", type=seconds, metavar="DURATION",
                   help="mean time between probes of one endpoint; each gap is random (exponential) so probes "
                   "see the server's time average, never its rhythm (default 2s; once: 200ms)")
    g.add_argument("--max-tokens", type=positive_int, metavar="N", help="tokens to ask for per probe (default 16)")
    g.add_argument("--prompt", help="probe prompt (a random prefix is added unless --no-random-prefix)")
    g.add_argument("--no-random-prefix", action="store_true",
                   help="send the prompt as is (prefix caching may then hide prefill time)")
    g.add_argument("--timeout", type=seconds, metavar="DURATION", help="whole-request timeout (default 30s)")
    g.add_argument("--first-token-timeout", type=seconds, metavar="DURATION",
                   help="give up when no token arrives within this time (default 15s)")
    g.add_argument("--connect-timeout", type=seconds, metavar="DURATION", help="connect timeout (default 5s)")
    g.add_argument("--metrics-url", metavar="URL",
                   help="Prometheus /metrics URL when not on the endpoint's own host:port (e.g. Triton's :8002)")
    g.add_argument("--no-metrics", action="store_true", help="do not scrape the servers' /metrics")
    g.add_argument("--no-discover", action="store_true",
                   help="with no URL given, do not look for local inference servers")
    a = parser.add_argument_group(
        "agent steps",
        "With --probe agent, lpxtop sends one agent step every interval: a streamed\n"
        "tool call (call 1), the tool, and the streamed answer with the tool's result\n"
        "(call 2). It costs the watched server TWO CALLS PER INTERVAL (on top of the\n"
        "chat probe's one with --probe chat,agent; one for an agent platform).",
    )
    a.add_argument("--probe", type=probe_kinds, metavar="KINDS",
                   help="chat (default), agent, or chat,agent")
    a.add_argument("--tool-choice", metavar="CHOICE",
                   help="call 1's tool_choice: required (default), auto, or the name of one tool")
    a.add_argument("--tools-file", metavar="FILE",
                   help="JSON tools (a list, or {\"tools\", \"prompt\", \"results\"}) instead of the built-in "
                   "three")
    a.add_argument("--tool-latency", type=tool_latency, metavar="DURATION",
                   help="how long the tool takes to run, e.g. 0ms (default), 250ms, 1.5s")
    a.add_argument("--chain-steps", type=chain_steps, metavar="N",
                   help="steps in the chain whose p50/p95 budget is shown (default 5)")
    a.add_argument("--bot-id", metavar="ID", help="the Coze bot to probe (--api coze)")
    a.add_argument("--inputs-file", metavar="FILE", help="a Dify workflow's inputs, a JSON object")
    w = parser.add_argument_group("statistics")
    w.add_argument("--window", type=duration_between(1.0, 86_400.0), metavar="DURATION",
                   help="rolling window for percentiles (default 5m)")
    w.add_argument("--max-samples", type=positive_int, metavar="N", help="samples kept per endpoint (default 300)")
    w.add_argument("--include-client-limited", action="store_true", default=None,
                   help="count probes during which lpxtop itself was late (its loop or its wait for a CPU; "
                   "flagged client_limited) in the percentiles too; by default they are only counted")
    add_alert_flags(parser)


def add_alert_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per alert threshold (`--alert-...`), each stored as `alert_<setting>`."""
    from lpxtop.engine import THRESHOLD_FLAGS

    g = parser.add_argument_group("alert thresholds (also [alerts] in the config file)")
    for flag, attr, help_text in THRESHOLD_FLAGS:
        if attr.endswith("_s"):  # a time: 60s, 5m
            g.add_argument(flag, dest=f"alert_{attr}", type=duration_between(0.0, 1e9), metavar="DURATION",
                           help=help_text)
        else:
            g.add_argument(flag, dest=f"alert_{attr}", type=finite_number, metavar="N", help=help_text)


def add_ui_flags(parser: argparse.ArgumentParser) -> None:
    """The dashboard's display flags (theme, refresh, readonly) and `--export` beside it."""
    g = parser.add_argument_group("display")
    g.add_argument("--theme", help="colour theme (lpxtop-dark, lpxtop-light, high-contrast, ...; `t` cycles)")
    g.add_argument("--refresh", type=duration_between(0.1, 60.0), metavar="DURATION",
                   help="screen refresh period (default 2s, as nvitop)")
    g.add_argument("--readonly", action="store_true", help="disable every process action (T/K)")
    g.add_argument("--export", metavar="HOST:PORT",
                   help="also serve /metrics and /probe for Prometheus there, as `lpxtop exporter` does "
                   "(e.g. 127.0.0.1:9464)")


def add_record_flags(parser: argparse.ArgumentParser) -> None:
    """--record, --record-file and the retention flags, for the commands that record beside the dashboard."""
    from lpxtop.record.settings import add_retention_flags

    g = parser.add_argument_group("recording (also `record = true` or [record] in the config file)")
    g.add_argument("--record", action="store_true",
                   help="record while the dashboard runs, to a new file in $XDG_STATE_HOME/lpxtop "
                   "(~/.local/state/lpxtop); `lpxtop replay FILE` plays it back")
    g.add_argument("--record-file", metavar="FILE", help="record to FILE (implies --record)")
    add_retention_flags(g)


# ---- endpoints and the engine ----

def endpoint_overrides(args: argparse.Namespace) -> dict:
    """The endpoint settings the flags give (None where a flag was not given: the file's value stands)."""
    return {
        "model": args.model,
        "api": args.api,
        "api_key_env": args.api_key_env,
        "interval_s": args.interval,
        "max_tokens": args.max_tokens,
        "prompt": args.prompt,
        "random_prefix": False if args.no_random_prefix else None,
        "timeout_s": args.timeout,
        "first_token_timeout_s": args.first_token_timeout,
        "connect_timeout_s": args.connect_timeout,
        "metrics_url": args.metrics_url,
        "probes": args.probe,
        "tool_choice": args.tool_choice,
        "tools_file": args.tools_file,
        "tool_latency_s": args.tool_latency,
        "chain_steps": args.chain_steps,
        "bot_id": args.bot_id,
        "inputs": read_inputs_file(args.inputs_file) if args.inputs_file else None,
    }


def load_endpoints(args: argparse.Namespace) -> FileConfig:
    """Endpoints from the file and the command line; flags override the file."""
    file_config = load_config_file(args.config) if args.config else FileConfig()
    overrides = endpoint_overrides(args)
    endpoints = [apply_overrides(e, overrides) for e in file_config.endpoints]
    taken = [e.name for e in endpoints]
    for config in endpoints_from_urls(args.urls, **overrides):
        if config.name in taken:
            raise ConfigError(f"{config.url}: given twice")
        endpoints.append(config)
    settled = []
    for config in endpoints:
        try:
            settled.append(settle_agent_settings(config))
        except ValueError as exc:
            raise ConfigError(f"{config.name}: {exc}") from None
    endpoints = settled
    if args.api_key_env and args.api_key_env not in os.environ:
        print(f"lpxtop: warning: ${args.api_key_env} is not set; probing without an API key", file=sys.stderr)
    file_config.endpoints = endpoints
    return file_config


def engine_for(args: argparse.Namespace, file_config: FileConfig):
    """The engine (not started) for the endpoints in `file_config`, with the flags' and the file's statistics
    and alert settings (flags win)."""
    from lpxtop.cli.assemble import build_engine
    from lpxtop.engine import AlertThresholds

    alert_flags = {k[len("alert_"):]: v for k, v in vars(args).items() if k.startswith("alert_") and v is not None}
    try:
        AlertThresholds.from_mapping(file_config.alerts)
    except ValueError as exc:
        raise ConfigError(f"{args.config}: [alerts]: {exc}") from None
    engine_settings = file_config.engine
    include_limited = args.include_client_limited
    if include_limited is None:
        include_limited = bool(engine_settings.get("include_client_limited", False))
    try:
        return build_engine(
            file_config.endpoints,
            window_s=args.window or engine_settings.get("window"),
            max_samples=args.max_samples or engine_settings.get("max_samples"),
            include_client_limited=include_limited,
            scrape_metrics=not args.no_metrics,
            discover=not args.no_discover and not file_config.endpoints,
            readonly=getattr(args, "readonly", False),
            alert_settings={**file_config.alerts, **alert_flags},
        )
    except ValueError as exc:  # the file's table passed above, so a flag is at fault
        raise ConfigError(f"alert threshold flag: {exc}") from None


HELD_LOG_RECORDS = 500  # log records kept while a full-screen view draws; the oldest go first


class _HeldRecords(logging.Handler):
    """Keeps the last HELD_LOG_RECORDS log records, counting those it had to drop."""

    def __init__(self) -> None:
        super().__init__()
        self.records: deque[logging.LogRecord] = deque(maxlen=HELD_LOG_RECORDS)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) == self.records.maxlen:
            self.dropped += 1
        self.records.append(record)


@contextlib.contextmanager
def logs_held_while_drawing() -> Iterator[None]:
    """While a Textual view owns the terminal, log records (`LPXTOP_LOG`, warnings) wait instead of being
    written over the screen; they are written to stderr, in order, once the view has given the terminal
    back."""
    root = logging.getLogger()
    terminal = [h for h in root.handlers
                if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) in (sys.stderr, sys.stdout)]
    if not terminal:
        yield
        return
    held = _HeldRecords()
    held.setLevel(min(h.level for h in terminal))
    for handler in terminal:
        root.removeHandler(handler)
    root.addHandler(held)
    try:
        yield
    finally:
        root.removeHandler(held)
        for handler in terminal:
            root.addHandler(handler)
        if held.dropped:
            root.warning("%d earlier log records were dropped while the screen was drawn", held.dropped)
        for record in held.records:
            for handler in terminal:
                if record.levelno >= handler.level:
                    handler.handle(record)
