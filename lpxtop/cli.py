"""The `lpxtop` command: the dashboard, `demo`, `once` and `sim`.

Headless paths (`once`, `sim`) never import Textual: the UI is imported only inside the functions
that open it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence

from lpxtop import __version__
from lpxtop.arguments import ArgumentParser, env_name
from lpxtop.config import (
    MAX_SECONDS,
    MIN_SECONDS,
    ConfigError,
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
from lpxtop.engine.traces.attach import add_traces_flags, finish_once, start_traces, stop_traces
from lpxtop.jsonout import dumps

# Subcommands whose code lives in a package of its own: module -> `build_parser(command)` and
# `run(command, args) -> int`. The module is imported only when its subcommand is used.
PACKAGE_SUBCOMMANDS: dict[str, str] = {
    "load": "lpxtop.load.cli",
    "exporter": "lpxtop.export.cli",
    "fleet": "lpxtop.fleet.cli",
    "record": "lpxtop.record.cli",
    "replay": "lpxtop.record.cli",
    "export": "lpxtop.record.cli",
}
SUBCOMMANDS = ("demo", "once", "sim", *PACKAGE_SUBCOMMANDS)
SWITCH_INTERVAL_S = 0.001

# `lpxtop --help` opens with these, one line each, as git and kubectl do; then the dashboard's flags by group.
SUBCOMMAND_SUMMARIES: dict[str, str] = {
    "demo": "the dashboard on simulated servers (no GPU or server needed)",
    "once": "probe N times and print a report (a table, or JSON with --json)",
    "load": "a load test, step by step, judged against an SLO, watched live",
    "sim": "the simulated OpenAI-compatible inference server alone",
    "exporter": "serve the measurements to Prometheus (/metrics, /probe)",
    "fleet": "the dashboard on many hosts, read back from Prometheus",
    "record": "record probes, server metrics, GPU and host; no dashboard",
    "replay": "play a recording back in the dashboard",
    "export": "write a recording as CSV, JSON lines or OpenMetrics",
}
USAGE = "%(prog)s [URL ...] [options]        the dashboard\n       %(prog)s COMMAND [...]              (lpxtop COMMAND --help)"
DESCRIPTION = (
    "top for LLM inference: live TTFT, inter-token latency, tokens/s and errors of\n"
    "OpenAI-compatible endpoints, with the server's metrics, GPU memory and ports.\n\n"
    "commands:\n"
    + "".join(f"  {name:<10} {text}\n" for name, text in SUBCOMMAND_SUMMARIES.items())
    + "\nWithout a command: the dashboard on the URLs given (or on the inference servers\n"
    "found on this machine), with the options below."
)

EPILOG = """\
examples:
  lpxtop demo                              the dashboard on simulated servers
  lpxtop http://127.0.0.1:8000/v1          watch a vLLM or SGLang server
  lpxtop 127.0.0.1:8000 127.0.0.1:30000    several endpoints, one row each
  lpxtop 127.0.0.1:8000 --api-key-env OPENAI_API_KEY   a server that wants a key
  lpxtop --config lpxtop.toml              endpoints from a file
  lpxtop once 127.0.0.1:8000 --samples 5 --json
  lpxtop load 127.0.0.1:8000 --concurrency 1,5,10 --slo "ttft_p95<=500ms"
  lpxtop 127.0.0.1:8000 --record           record while watching (then: replay)

exit status (once): 0 every endpoint answered, 1 an endpoint is down, 2 usage or
config error.
"""


def _number(low: float, high: float) -> Callable[[str], float]:
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


_seconds = duration_between(MIN_SECONDS, MAX_SECONDS)


def _positive_float(text: str) -> float:
    """An argparse type: a finite number greater than 0 (and below 1e12: NaN, Infinity and 1e300 are usage errors)."""
    value = _number(0.0, 1e12)(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value
_finite = _number(-1e12, 1e12)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 < value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number between 1 and 1000000")
    return value


def _probe_kinds(text: str) -> tuple[str, ...]:
    try:
        return parse_probes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(text: str) -> float:
    try:
        return parse_duration_s(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _chain_steps(text: str) -> int:
    value = _positive_int(text)
    if value > 50:
        raise argparse.ArgumentTypeError(f"{text!r}: at most 50 steps")
    return value


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("probing")
    g.add_argument("urls", nargs="*", metavar="URL",
                   help="OpenAI-compatible endpoint: http://host:port/v1, http://host:port or host:port")
    g.add_argument("-c", "--config", metavar="FILE", help="read endpoints (and alert, UI settings) from a TOML file")
    g.add_argument("-m", "--model", help="model to request (default: the first one /v1/models lists)")
    g.add_argument("--api", choices=("chat", "completions", "dify", "dify-workflow", "coze"), metavar="API",
                   help="chat (default), completions; agent platforms: dify, dify-workflow, coze")
    g.add_argument("--api-key-env", type=env_name, metavar="VAR",
                   help="environment variable that holds the API key (the key itself is never shown or saved)")
    g.add_argument("-i", "--interval", type=_seconds, metavar="DURATION",
                   help="mean time between probes of one endpoint; each gap is random (exponential) so probes "
                   "see the server's time average, never its rhythm (default 2s; once: 200ms)")
    g.add_argument("--max-tokens", type=_positive_int, metavar="N", help="tokens to ask for per probe (default 16)")
    g.add_argument("--prompt", help="probe prompt (a random prefix is added unless --no-random-prefix)")
    g.add_argument("--no-random-prefix", action="store_true",
                   help="send the prompt as is (prefix caching may then hide prefill time)")
    g.add_argument("--timeout", type=_seconds, metavar="DURATION", help="whole-request timeout (default 30s)")
    g.add_argument("--first-token-timeout", type=_seconds, metavar="DURATION",
                   help="give up when no token arrives within this time (default 15s)")
    g.add_argument("--connect-timeout", type=_seconds, metavar="DURATION", help="connect timeout (default 5s)")
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
    a.add_argument("--probe", type=_probe_kinds, metavar="KINDS",
                   help="chat (default), agent, or chat,agent")
    a.add_argument("--tool-choice", metavar="CHOICE",
                   help="call 1's tool_choice: required (default), auto, or the name of one tool")
    a.add_argument("--tools-file", metavar="FILE",
                   help="JSON tools (a list, or {\"tools\", \"prompt\", \"results\"}) instead of the built-in "
                   "three")
    a.add_argument("--tool-latency", type=_duration, metavar="DURATION",
                   help="how long the tool takes to run, e.g. 0ms (default), 250ms, 1.5s")
    a.add_argument("--chain-steps", type=_chain_steps, metavar="N",
                   help="steps in the chain whose p50/p95 budget is shown (default 5)")
    a.add_argument("--bot-id", metavar="ID", help="the Coze bot to probe (--api coze)")
    a.add_argument("--inputs-file", metavar="FILE", help="a Dify workflow's inputs, a JSON object")
    w = parser.add_argument_group("statistics")
    w.add_argument("--window", type=duration_between(1.0, 86_400.0), metavar="DURATION",
                   help="rolling window for percentiles (default 5m)")
    w.add_argument("--max-samples", type=_positive_int, metavar="N", help="samples kept per endpoint (default 300)")
    w.add_argument("--include-client-limited", action="store_true", default=None,
                   help="count probes during which lpxtop itself was late (its loop or its wait for a CPU; "
                   "flagged client_limited) in the percentiles too; by default they are only counted")
    _add_alert_flags(parser)


def _add_alert_flags(parser: argparse.ArgumentParser) -> None:
    try:
        from lpxtop.engine.alerts import THRESHOLD_FLAGS
    except ImportError:  # pragma: no cover - until alerts land
        return
    g = parser.add_argument_group("alert thresholds (also [alerts] in the config file)")
    for flag, attr, help_text in THRESHOLD_FLAGS:
        if attr.endswith("_s"):  # a time: 60s, 5m
            g.add_argument(flag, dest=f"alert_{attr}", type=duration_between(0.0, 1e9), metavar="DURATION",
                           help=help_text)
        else:
            g.add_argument(flag, dest=f"alert_{attr}", type=_finite, metavar="N", help=help_text)


def _add_ui_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("display")
    g.add_argument("--theme", help="colour theme (lpxtop-dark, lpxtop-light, high-contrast, ...; `t` cycles)")
    g.add_argument("--refresh", type=duration_between(0.1, 60.0), metavar="DURATION",
                   help="screen refresh period (default 2s, as nvitop)")
    g.add_argument("--readonly", action="store_true", help="disable every process action (T/K)")
    g.add_argument("--export", metavar="HOST:PORT",
                   help="also serve /metrics and /probe for Prometheus there, as `lpxtop exporter` does "
                   "(e.g. 127.0.0.1:9464)")


def _recording_format() -> int:
    from lpxtop.record.fileformat import FORMAT_VERSION

    return FORMAT_VERSION


def _add_record_flags(parser: argparse.ArgumentParser) -> None:
    from lpxtop.record.settings import add_retention_flags

    g = parser.add_argument_group("recording (also `record = true` or [record] in the config file)")
    g.add_argument("--record", action="store_true",
                   help="record while the dashboard runs, to a new file in $XDG_STATE_HOME/lpxtop "
                   "(~/.local/state/lpxtop); `lpxtop replay FILE` plays it back")
    g.add_argument("--record-file", metavar="FILE", help="record to FILE (implies --record)")
    add_retention_flags(g)


def _add_otlp_flags(parser: argparse.ArgumentParser) -> None:
    from lpxtop.otel.cli import add_otlp_flags

    add_otlp_flags(parser)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for the dashboard (command None) or for one subcommand."""
    fmt = argparse.RawDescriptionHelpFormatter
    if command is None:
        parser = ArgumentParser(
            prog="lpxtop",
            usage=USAGE,
            description=DESCRIPTION,
            epilog=EPILOG,
            formatter_class=fmt,
        )
        parser.add_argument("--version", action="version", version=f"lpxtop {__version__} (recording format "
                            f"{_recording_format()})")
        _add_endpoint_flags(parser)
        _add_ui_flags(parser)
        _add_record_flags(parser)
        _add_otlp_flags(parser)
        add_traces_flags(parser)
        return parser
    if command == "once":
        parser = ArgumentParser(
            prog="lpxtop once",
            description="Probe each endpoint N times, at random gaps averaging --interval (0.2 s unless given),\n"
            "while scraping each server's /metrics on a schedule of its own; then print a report (a table,\n"
            "or JSON schema 1 with --json): the probes' percentiles, and what the server showed across the\n"
            "run (last, max and mean of running, waiting and KV use). Never opens the dashboard.\n\n"
            "exit status: 0 every endpoint answered, 1 an endpoint is down, 2 usage or config error.",
            formatter_class=fmt,
        )
        parser.add_argument("-n", "--samples", type=_positive_int, default=3, metavar="N",
                            help="probes per endpoint (default 3)")
        parser.add_argument("--json", action="store_true", help="print JSON (schema 1, see docs/json.md)")
        parser.add_argument("--deadline", type=duration_between(0.1, 86_400.0), default=120.0, metavar="DURATION",
                            help="end within this long in all, discovery included, and report what was "
                            "measured by then (default 2m)")
        parser.add_argument("--record", metavar="FILE",
                            help="also record the probes and readings to FILE (lpxtop replay/export read it)")
        _add_endpoint_flags(parser)
        _add_otlp_flags(parser)
        add_traces_flags(parser)
        return parser
    if command == "demo":
        parser = ArgumentParser(
            prog="lpxtop demo",
            description="Open the dashboard on simulated inference servers that lpxtop runs itself on "
            "127.0.0.1 (one also probed with agent steps, one playing a Dify agent app, a Dify workflow and a Coze "
            "bot), with load that rises and falls "
            "and a simulated GPU. No GPU, server or network needed. "
            "Press g in the dashboard to surge the load and provoke the warnings.",
            formatter_class=fmt,
        )
        parser.add_argument("--surge", action="store_true", help="start with the load surge on")
        parser.add_argument("--interval", type=_seconds, default=1.0, metavar="DURATION",
                            help="mean time between probes (default 1s)")
        _add_ui_flags(parser)
        _add_record_flags(parser)
        _add_otlp_flags(parser)
        return parser
    if command in PACKAGE_SUBCOMMANDS:
        return importlib.import_module(PACKAGE_SUBCOMMANDS[command]).build_parser(command)
    if command == "sim":
        from lpxtop.sim.cli import add_sim_arguments

        parser = ArgumentParser(
            prog="lpxtop sim",
            description="Run the simulated OpenAI-compatible inference server alone (vLLM-like batching, "
            "queueing, KV cache, /metrics in vLLM's format, injectable faults). It also plays the agent "
            "platforms: a Dify app (/v1/chat-messages), a Dify workflow (/v1/workflows/run) and a Coze bot "
            "(/v3/chat).",
            formatter_class=fmt,
        )
        add_sim_arguments(parser)
        return parser
    raise ValueError(command)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = args_list[0] if args_list and args_list[0] in SUBCOMMANDS else None
    if command is not None:
        args_list = args_list[1:]
    parser = build_parser(command)
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # argparse: 0 for --help/--version, 2 for usage errors
        return int(exc.code or 0)
    logging.basicConfig(level=os.environ.get("LPXTOP_LOG", "WARNING").upper(), stream=sys.stderr,
                        format="lpxtop: %(levelname)s %(name)s: %(message)s")
    try:
        if command in PACKAGE_SUBCOMMANDS:
            return int(importlib.import_module(PACKAGE_SUBCOMMANDS[command]).run(command, args))
        if command == "sim":
            from lpxtop.sim.cli import run_sim

            return run_sim(args)
        if command == "demo":
            return _run_demo(args)
        if command == "once":
            return _run_once(args)
        return _run_dashboard(args)
    except ConfigError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _endpoint_overrides(args: argparse.Namespace) -> dict:
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


def _load(args: argparse.Namespace) -> FileConfig:
    """Endpoints from the file and the command line; flags override the file."""
    file_config = load_config_file(args.config) if args.config else FileConfig()
    overrides = _endpoint_overrides(args)
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


def _engine_for(args: argparse.Namespace, file_config: FileConfig):
    from lpxtop.assemble import build_engine
    from lpxtop.engine.alerts import AlertThresholds

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


def _run_once(args: argparse.Namespace) -> int:
    from lpxtop.report import exit_status, render_table

    file_config = _load(args)
    engine = _engine_for(args, file_config)
    # as the dashboard does: a thread that wakes with bytes to stamp waits ~1 ms for the lock, not 5
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    otlp = _otlp_for(engine, args, file_config)
    began = time.monotonic()
    traces = start_traces(engine, args, file_config.traces, endpoints=file_config.endpoints)
    recorder = None
    if args.record:
        from lpxtop.record.recorder import Recorder
        from lpxtop.record.store import RecordingExists

        # A file that exists is a usage error; one that cannot be written (a full disk) stops only the
        # recording: the report is still printed, with the recorder's alert.
        try:
            recorder = Recorder.start_for(engine, args.record, endpoints=file_config.endpoints,
                                          refuse_existing=True)
        except RecordingExists as exc:
            _stop_otlp(otlp, quiet=True)
            stop_traces(traces, quiet=True)
            raise ConfigError(str(exc)) from None
    try:
        snapshot = engine.collect_once(samples=args.samples, timeout_s=max(0.1, args.deadline - (time.monotonic() - began)),
                                       interval_s=args.interval)
        # the probes' server spans, within what --deadline leaves (vLLM batches them: seconds late)
        snapshot = finish_once(traces, snapshot, args.deadline - (time.monotonic() - began))
    finally:
        stop_traces(traces)
        if recorder is not None:
            recorder.close()
            if recorder.failure is not None:
                print(f"lpxtop: recording stopped: {recorder.failure}", file=sys.stderr)
        _stop_otlp(otlp)
    data = snapshot.to_json()
    data["otlp"] = otlp.status() if otlp is not None else None  # what OpenTelemetry export sent and lost
    data["traces"] = traces.status() if traces is not None else None  # the receiver's counts (docs/traces.md)
    if not snapshot.endpoints:
        message = "no endpoint given and none found on this machine: pass a URL (lpxtop once 127.0.0.1:8000)"
        if args.json:
            print(dumps(data, indent=2))
        print(f"lpxtop: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(dumps(data, indent=2))
    else:
        print(render_table(snapshot))
    return exit_status(snapshot)


def _run_dashboard(args: argparse.Namespace) -> int:
    file_config = _load(args)
    engine = _engine_for(args, file_config)
    otlp = _otlp_for(engine, args, file_config)
    traces = start_traces(engine, args, file_config.traces, endpoints=file_config.endpoints, wait=False)
    recorder = _start_recording(engine, args, file_config.record, file_config.endpoints)
    exporter = _exporter_for(args, engine, file_config.exporter)
    try:
        return _open_ui(engine, args, file_config.ui)
    finally:
        _stop_recording(recorder)
        if exporter is not None:
            exporter.stop()
        _stop_otlp(otlp)
        stop_traces(traces)


def _run_demo(args: argparse.Namespace) -> int:
    from lpxtop.demo import start_demo

    with start_demo(interval_s=args.interval, surge=args.surge, readonly=args.readonly) as engine:
        otlp = _otlp_for(engine, args, None)
        recorder = _start_recording(engine, args, {}, ())
        exporter = _exporter_for(args, engine, {})
        try:
            return _open_ui(engine, args, {})
        finally:
            _stop_recording(recorder)
            if exporter is not None:
                exporter.stop()
            _stop_otlp(otlp)


def _otlp_for(engine, args: argparse.Namespace, file_config: FileConfig | None):
    """With --otlp (or an [otlp] table): the OpenTelemetry pipeline beside the engine, attached before it starts
    (lpxtop/otel). The OpenTelemetry packages are imported only then."""
    if getattr(args, "otlp", None) is None and not (file_config is not None and file_config.otlp):
        return None
    from lpxtop.otel.cli import start_otlp

    return start_otlp(engine, args, file_config.otlp if file_config is not None else None)


def _stop_otlp(otlp, quiet: bool = False) -> None:
    if otlp is not None:
        from lpxtop.otel.cli import stop_otlp

        stop_otlp(otlp, quiet=quiet)


def _exporter_for(args: argparse.Namespace, engine, table: dict):
    """With --export ADDR: the exporter beside the dashboard's engine (before it starts, so it sees every probe)."""
    if not getattr(args, "export", None):
        return None
    from lpxtop.export.cli import exporter_settings, start_exporter

    args.host_label = args.no_probe_endpoint = args.probe_timeout = None
    return start_exporter(engine, exporter_settings(args, table, getattr(args, "config", None), args.export))


def _start_recording(engine, args: argparse.Namespace, table: dict, endpoints):
    """A recorder attached to the dashboard's engine when asked (flags or config); None otherwise.
    A file that cannot be written does not stop the dashboard: the recorder's alert says why."""
    from lpxtop.record.settings import resolve

    try:
        settings = resolve(args, table, enabled=args.record, path=args.record_file)
    except ValueError as exc:
        raise ConfigError(f"recording: {exc}") from None
    if not settings.enabled:
        return None
    from lpxtop.record.recorder import Recorder

    recorder = Recorder.start_for(engine, settings.target(), endpoints=endpoints, retention=settings.retention,
                                  clean_dir=settings.cleans_directory)
    engine.recorder = recorder  # the UI finds it there: `b` bookmarks, the header shows REC
    return recorder


def _stop_recording(recorder) -> None:
    if recorder is None:
        return
    recorder.close()
    if recorder.failure is not None:
        print(f"lpxtop: recording stopped: {recorder.failure}", file=sys.stderr)
    else:
        print(f"lpxtop: recorded to {recorder.path} (lpxtop replay {recorder.path})", file=sys.stderr)


def _open_ui(engine, args: argparse.Namespace, ui_settings: dict) -> int:
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    theme = args.theme or ui_settings.get("theme")
    refresh = args.refresh or ui_settings.get("refresh")
    try:
        app = create_app(engine, theme=theme, refresh_s=refresh, readonly=args.readonly,
                         on_ready=lambda: _start_measuring(engine))
    except ThemeError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return 2
    # The probe loop runs on its own thread, but it shares the interpreter lock with rendering: a
    # shorter switch interval bounds how long a byte's timestamp can wait behind a repaint.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        app.run()
    finally:
        engine.stop()
    return 0


def _start_measuring(engine) -> None:
    """Start probing once the UI has drawn its first frame.

    Start-up leaves ~58,000 objects for the garbage collector; a full collection over them holds the
    interpreter lock for tens of milliseconds, which would land in some probe's timestamps. Freeze them
    now (gc.freeze, no walk), so later collections only scan what is new. No collection first: at this
    point it found nothing to free (0 unreachable objects in every measured start) and cost ~30-50 ms
    before the first probe could leave.
    """
    gc.freeze()
    engine.start()
