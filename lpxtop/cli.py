"""The `lpxtop` command: the dashboard, `demo`, `once` and `sim`.

Headless paths (`once`, `sim`) never import Textual: the UI is imported only inside the functions
that open it.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import sys
from collections.abc import Sequence

from lpxtop import __version__
from lpxtop.config import ConfigError, FileConfig, apply_overrides, endpoints_from_urls, load_config_file

# Subcommands whose code lives in a package of its own: module -> `build_parser(command)` and
# `run(command, args) -> int`. The module is imported only when its subcommand is used.
PACKAGE_SUBCOMMANDS: dict[str, str] = {"load": "lpxtop.load.cli"}
SUBCOMMANDS = ("demo", "once", "sim", *PACKAGE_SUBCOMMANDS)
SWITCH_INTERVAL_S = 0.001

EPILOG = """\
examples:
  lpxtop demo                                 the dashboard on two simulated servers (no GPU or server needed)
  lpxtop http://127.0.0.1:8000/v1             watch a local vLLM / SGLang / llama.cpp / TGI server
  lpxtop 127.0.0.1:8000 127.0.0.1:30000       several endpoints, one row each
  lpxtop --config lpxtop.toml                 endpoints from a file
  lpxtop once 127.0.0.1:8000 --samples 5 --json
  lpxtop sim --port 8000                      run the simulated server alone
  lpxtop load 127.0.0.1:8000 --concurrency 1,5,10 --slo "ttft_p95<=500ms"   load test, step by step

exit status (once): 0 every endpoint answered, 1 an endpoint is down, 2 usage or config error.
"""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _add_endpoint_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("probing")
    g.add_argument("urls", nargs="*", metavar="URL",
                   help="OpenAI-compatible endpoint: http://host:port/v1, http://host:port or host:port")
    g.add_argument("-c", "--config", metavar="FILE", help="read endpoints (and alert, UI settings) from a TOML file")
    g.add_argument("-m", "--model", help="model to request (default: the first one /v1/models lists)")
    g.add_argument("--api", choices=("chat", "completions"),
                   help="probe /v1/chat/completions (default) or /v1/completions")
    g.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable that holds the API key (the key itself is never shown or saved)")
    g.add_argument("-i", "--interval", type=_positive_float, metavar="SECONDS",
                   help="seconds between probes of one endpoint (default 2)")
    g.add_argument("--max-tokens", type=_positive_int, metavar="N", help="tokens to ask for per probe (default 16)")
    g.add_argument("--prompt", help="probe prompt (a random prefix is added unless --no-random-prefix)")
    g.add_argument("--no-random-prefix", action="store_true",
                   help="send the prompt as is (prefix caching may then hide prefill time)")
    g.add_argument("--timeout", type=_positive_float, metavar="SECONDS", help="whole-request timeout (default 30)")
    g.add_argument("--first-token-timeout", type=_positive_float, metavar="SECONDS",
                   help="give up when no token arrives within this time (default 15)")
    g.add_argument("--connect-timeout", type=_positive_float, metavar="SECONDS", help="connect timeout (default 5)")
    g.add_argument("--metrics-url", metavar="URL",
                   help="Prometheus /metrics URL when not on the endpoint's own host:port (e.g. Triton's :8002)")
    g.add_argument("--no-metrics", action="store_true", help="do not scrape the servers' /metrics")
    g.add_argument("--no-discover", action="store_true",
                   help="with no URL given, do not look for local inference servers")
    w = parser.add_argument_group("statistics")
    w.add_argument("--window", type=_positive_float, metavar="SECONDS",
                   help="rolling window for percentiles (default 300)")
    w.add_argument("--max-samples", type=_positive_int, metavar="N", help="samples kept per endpoint (default 300)")
    _add_alert_flags(parser)


def _add_alert_flags(parser: argparse.ArgumentParser) -> None:
    try:
        from lpxtop.engine.alerts import THRESHOLD_FLAGS
    except ImportError:  # pragma: no cover - until alerts land
        return
    g = parser.add_argument_group("alert thresholds (also [alerts] in the config file)")
    for flag, attr, help_text in THRESHOLD_FLAGS:
        g.add_argument(flag, dest=f"alert_{attr}", type=float, metavar="N", help=help_text)


def _add_ui_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("display")
    g.add_argument("--theme", help="colour theme (lpxtop-dark, lpxtop-light, high-contrast, ...; `t` cycles)")
    g.add_argument("--refresh", type=_positive_float, metavar="SECONDS",
                   help="screen refresh period (default 2, as nvitop)")
    g.add_argument("--readonly", action="store_true", help="disable every process action (T/K)")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for the dashboard (command None) or for one subcommand."""
    fmt = argparse.RawDescriptionHelpFormatter
    if command is None:
        parser = argparse.ArgumentParser(
            prog="lpxtop",
            description="top for LLM inference: live TTFT, inter-token latency, tokens/s and errors of "
            "OpenAI-compatible endpoints, with the server's own metrics, GPU memory and port health.\n\n"
            "subcommands: demo (simulated servers), once (headless report), sim (simulated server), "
            "load (run a load test and watch it); "
            "`lpxtop SUBCOMMAND --help` for each.",
            epilog=EPILOG,
            formatter_class=fmt,
        )
        parser.add_argument("--version", action="version", version=f"lpxtop {__version__}")
        _add_endpoint_flags(parser)
        _add_ui_flags(parser)
        return parser
    if command == "once":
        parser = argparse.ArgumentParser(
            prog="lpxtop once",
            description="Probe each endpoint N times, then print a report (a table, or JSON schema 1 with "
            "--json). Never opens the dashboard.\n\nexit status: 0 every endpoint answered, 1 an endpoint is "
            "down, 2 usage or config error.",
            formatter_class=fmt,
        )
        parser.add_argument("-n", "--samples", type=_positive_int, default=3, metavar="N",
                            help="probes per endpoint (default 3)")
        parser.add_argument("--json", action="store_true", help="print JSON (schema 1, see the README)")
        parser.add_argument("--deadline", type=_positive_float, default=120.0, metavar="SECONDS",
                            help="give up after this long in all (default 120)")
        _add_endpoint_flags(parser)
        return parser
    if command == "demo":
        parser = argparse.ArgumentParser(
            prog="lpxtop demo",
            description="Open the dashboard on two simulated inference servers that lpxtop runs itself on "
            "127.0.0.1, with load that rises and falls and a simulated GPU. No GPU, server or network needed. "
            "Press g in the dashboard to surge the load and provoke the warnings.",
            formatter_class=fmt,
        )
        parser.add_argument("--surge", action="store_true", help="start with the load surge on")
        parser.add_argument("--interval", type=_positive_float, default=1.0, metavar="SECONDS",
                            help="seconds between probes (default 1)")
        _add_ui_flags(parser)
        return parser
    if command in PACKAGE_SUBCOMMANDS:
        return importlib.import_module(PACKAGE_SUBCOMMANDS[command]).build_parser(command)
    if command == "sim":
        from lpxtop.sim.cli import add_sim_arguments

        parser = argparse.ArgumentParser(
            prog="lpxtop sim",
            description="Run the simulated OpenAI-compatible inference server alone (vLLM-like batching, "
            "queueing, KV cache, /metrics in vLLM's format, injectable faults).",
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
    try:
        return build_engine(
            file_config.endpoints,
            window_s=args.window,
            max_samples=args.max_samples,
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
    snapshot = engine.collect_once(samples=args.samples, timeout_s=args.deadline)
    if not snapshot.endpoints:
        message = "no endpoint given and none found on this machine: pass a URL (lpxtop once 127.0.0.1:8000)"
        if args.json:
            print(json.dumps(snapshot.to_json(), indent=2))
        print(f"lpxtop: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(snapshot.to_json(), indent=2))
    else:
        print(render_table(snapshot))
    return exit_status(snapshot)


def _run_dashboard(args: argparse.Namespace) -> int:
    file_config = _load(args)
    engine = _engine_for(args, file_config)
    return _open_ui(engine, args, file_config.ui)


def _run_demo(args: argparse.Namespace) -> int:
    from lpxtop.demo import start_demo

    with start_demo(interval_s=args.interval, surge=args.surge, readonly=args.readonly) as engine:
        return _open_ui(engine, args, {})


def _open_ui(engine, args: argparse.Namespace, ui_settings: dict) -> int:
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    theme = args.theme or ui_settings.get("theme")
    try:
        app = create_app(engine, theme=theme, refresh_s=args.refresh, readonly=args.readonly,
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

    Start-up leaves many objects for the garbage collector; a full collection holds the interpreter
    lock for tens of milliseconds, which would land in some probe's timestamps. Collect once now and
    freeze what survives, so later collections only scan what is new.
    """
    gc.collect()
    gc.freeze()
    engine.start()
