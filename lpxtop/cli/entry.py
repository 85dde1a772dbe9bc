"""The `lpxtop` command: its top-level help (the dashboard's flags and the list of commands), and each
subcommand handed to its module in lpxtop/cli/.

Headless paths (`once`, `sim`, `record`, `exporter`, ...) never import Textual: the UI is imported only
inside the functions that open it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from lpxtop import __version__
from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import add_endpoint_flags, add_record_flags, add_ui_flags
from lpxtop.cli.dashboard import run_dashboard
from lpxtop.cli.otlp import add_otlp_flags
from lpxtop.engine.traces import add_traces_flags

# Each subcommand's module: `build_parser(command)` and `run(command, args) -> int`. The module is imported
# only when its subcommand is used.
COMMAND_MODULES: dict[str, str] = {
    "demo": "lpxtop.cli.dashboard",
    "once": "lpxtop.cli.once",
    "sim": "lpxtop.cli.sim",
    "load": "lpxtop.cli.load",
    "exporter": "lpxtop.cli.exporter",
    "fleet": "lpxtop.cli.fleet",
    "record": "lpxtop.cli.record",
    "replay": "lpxtop.cli.record",
    "export": "lpxtop.cli.record",
}
SUBCOMMANDS = tuple(COMMAND_MODULES)

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


def _recording_format() -> int:
    from lpxtop.record.fileformat import FORMAT_VERSION

    return FORMAT_VERSION


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
        add_endpoint_flags(parser)
        add_ui_flags(parser)
        add_record_flags(parser)
        add_otlp_flags(parser)
        add_traces_flags(parser)
        return parser
    if command in COMMAND_MODULES:
        return importlib.import_module(COMMAND_MODULES[command]).build_parser(command)
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
        if command is not None:
            return int(importlib.import_module(COMMAND_MODULES[command]).run(command, args))
        return run_dashboard(args)
    except ConfigError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
