"""`lpxtop record`, `lpxtop replay` and `lpxtop export` (registered in lpxtop/cli/entry.py COMMAND_MODULES).

`record` and `export` never import Textual; `replay` opens the dashboard (imported only then), or
prints a comparison without it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import (
    add_endpoint_flags,
    add_ui_flags,
    duration_between,
    engine_for,
    load_endpoints,
    logs_held_while_drawing,
)
from lpxtop.cli.otlp import add_otlp_flags, otlp_for, stop_otlp
from lpxtop.durations import format_duration
from lpxtop.engine.traces import add_traces_flags, start_traces, stop_traces

FMT = argparse.RawDescriptionHelpFormatter
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser(command: str) -> argparse.ArgumentParser:
    if command == "record":
        return _record_parser()
    if command == "replay":
        return _replay_parser()
    if command == "export":
        return _export_parser()
    raise ValueError(command)


def run(command: str, args: argparse.Namespace) -> int:
    from lpxtop.record.store import RecordingError

    try:
        if command == "record":
            return _run_record(args)
        if command == "replay":
            return _run_replay(args)
        if command == "export":
            return _run_export(args)
    except RecordingError as exc:
        print(f"lpxtop {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:  # a time, duration or size the user wrote
        print(f"lpxtop {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    raise ValueError(command)


# ---- record ----

def _record_parser() -> argparse.ArgumentParser:
    from lpxtop.record.settings import add_retention_flags

    parser = ArgumentParser(
        prog="lpxtop record",
        description="Record the endpoints' probes, server metrics, GPU, host and ports without the dashboard "
        "(for boxes without tmux, systemd units or a CI job), until --duration ends, Ctrl-C or SIGTERM. "
        "`lpxtop replay FILE` shows it in the dashboard; `lpxtop export FILE` writes CSV, JSONL or "
        "OpenMetrics.\n\nThe file's path is printed on stdout at the end.\n\nexit status: 0 recorded, "
        "1 the recording stopped early (disk full, unwritable), 2 usage or config error.",
        formatter_class=FMT,
    )
    g = parser.add_argument_group("recording")
    g.add_argument("-o", "--out", metavar="FILE",
                   help="the file to write (default: a new one in $XDG_STATE_HOME/lpxtop, ~/.local/state/lpxtop)")
    g.add_argument("-d", "--duration", type=duration_between(0.001, 1e9), metavar="DURATION",
                   help="stop after this long (90s, 15m, 1h; default: until Ctrl-C or SIGTERM)")
    g.add_argument("-q", "--quiet", action="store_true", help="print only the file's path")
    add_retention_flags(g)
    add_endpoint_flags(parser)
    add_otlp_flags(parser)
    add_traces_flags(parser)
    return parser


def _run_record(args: argparse.Namespace) -> int:
    from lpxtop.humanize import file_size
    from lpxtop.record.recorder import Recorder
    from lpxtop.record.settings import resolve
    from lpxtop.record.store import RecordingError, RecordingExists

    duration = args.duration
    file_config = load_endpoints(args)
    settings = resolve(args, file_config.record, enabled=True, path=args.out)
    engine = engine_for(args, file_config)
    path = settings.target()
    otlp = otlp_for(engine, args, file_config)
    traces = start_traces(engine, args, file_config.traces, endpoints=file_config.endpoints)
    # Before the file exists: a SIGTERM from then on ends the recording cleanly, never half-way.
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        recorder = Recorder.start_for(engine, path, endpoints=file_config.endpoints, retention=settings.retention,
                                      clean_dir=settings.cleans_directory, strict=True, meta={"command": "record"})
    except RecordingError as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stop_otlp(otlp, quiet=True)
        stop_traces(traces, quiet=True)
        if isinstance(exc, RecordingExists):
            raise  # a usage error (exit 2)
        print(f"lpxtop record: recording stopped: {exc}", file=sys.stderr)  # a full disk, no permission
        return EXIT_FAILED
    if not args.quiet:
        what = f"{len(file_config.endpoints)} endpoint(s)" if file_config.endpoints else "the endpoints found here"
        until = f"for {format_duration(duration)}" if duration else "until Ctrl-C"
        print(f"lpxtop record: recording {what} to {path} {until} ({settings.retention.describe()})",
              file=sys.stderr)
    began = time.monotonic()
    try:
        engine.start()
        while not stop.is_set():
            left = None if duration is None else duration - (time.monotonic() - began)
            if left is not None and left <= 0:
                break
            stop.wait(1.0 if left is None else min(1.0, left))
            if recorder.failure is not None:
                break
    finally:
        engine.stop()
        stop_traces(traces, prog="lpxtop record", quiet=args.quiet)  # before the close: its last joins are kept
        recorder.close()
        stop_otlp(otlp, quiet=args.quiet)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if recorder.failure is not None:
        print(f"lpxtop record: recording stopped: {recorder.failure}", file=sys.stderr)
        if recorder.kept_path is not None:  # what was committed before the failure
            print(recorder.kept_path)
        return EXIT_FAILED
    if not args.quiet:
        seconds = time.monotonic() - began
        print(f"lpxtop record: {recorder.events_written} events in {seconds:.0f} s, "
              f"{file_size(recorder.stored_bytes)} stored", file=sys.stderr)
    print(path)
    return EXIT_OK


# ---- replay ----

def _replay_parser() -> argparse.ArgumentParser:
    from lpxtop.record.timeparse import HELP

    parser = ArgumentParser(
        prog="lpxtop replay",
        description="Open the dashboard on a recording, with a time bar: every panel and the detail screen show "
        "what they showed live at that moment.\n\nkeys: space play/pause, ← → step 10 s (shift: 1 min), "
        "[ ] slower/faster, n N next/previous alert, restart, load step or bookmark, a next alert, "
        "j jump to a time, < > start/end. --compare B shows two recordings side by side.",
        formatter_class=FMT,
    )
    parser.add_argument("file", metavar="FILE", help="a recording (written by `lpxtop --record`, `lpxtop record` or `lpxtop once --record`)")
    parser.add_argument("--at", metavar="TIME", help=f"start paused at TIME: {HELP}")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X", help="playback speed (default 1)")
    parser.add_argument("--compare", metavar="B", help="compare FILE (A) with recording B: each endpoint's "
                        "percentiles in A and B and the change")
    parser.add_argument("--json", action="store_true", help="with --compare: print the comparison as JSON")
    parser.add_argument("--text", action="store_true", help="with --compare: print the comparison as a table")
    add_ui_flags(parser)
    return parser


def _run_replay(args: argparse.Namespace) -> int:
    from lpxtop.record.replay import ReplaySource
    from lpxtop.record.timeparse import parse_moment

    if (args.json or args.text) and not args.compare:
        raise ConfigError("--json and --text go with --compare B")
    if args.compare:
        from lpxtop.record.compare import compare_files, render_comparison

        comparison = compare_files(args.file, args.compare)
        if args.json:
            print(json.dumps(comparison.to_json(), indent=2))
            return EXIT_OK
        if args.text or not sys.stdout.isatty():
            print(render_comparison(comparison))
            return EXIT_OK
    else:
        comparison = None
    source = ReplaySource(args.file, speed=args.speed)
    if args.at:
        source.timeline.seek(parse_moment(args.at, source.start, source.end))
        source.timeline.play(False)
    damage = source.recording.damage_summary()
    if damage:
        print(f"lpxtop replay: {args.file}: {damage}", file=sys.stderr)
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    try:
        app = create_app(source, theme=args.theme, refresh_s=args.refresh, readonly=True, comparison=comparison)
    except ThemeError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with logs_held_while_drawing():
            app.run()
    finally:
        source.close()
    return EXIT_OK


# ---- export ----

def _export_parser() -> argparse.ArgumentParser:
    from lpxtop.record.export import FORMATS, WHAT
    from lpxtop.record.timeparse import HELP

    parser = ArgumentParser(
        prog="lpxtop export",
        description="Write a recording as plain data: CSV or JSON lines for notebooks and spreadsheets, or "
        "OpenMetrics text that `promtool tsdb create-blocks-from openmetrics FILE DIR` turns into Prometheus "
        "blocks (a backfill).\n\nJSONL: one object a line with \"type\" (probe, agent_step, server, gpu, host, port, "
        "alert, load_step, load, mark) and \"time\" (Unix seconds); a probe also has endpoint, ok, error (kind or "
        "null), ttft_ms, e2e_ms, itl_ms (list), output_tokens and the rest of what the probe measured; an agent_step "
        "has endpoint, ok, error and every time of the step (time_to_tool_call_ms, step_ms ...).",
        formatter_class=FMT,
    )
    parser.add_argument("file", metavar="FILE", help="a recording")
    parser.add_argument("-f", "--format", choices=FORMATS, default="jsonl", help="default jsonl")
    parser.add_argument("-w", "--what", metavar="KINDS",
                        help=f"comma-separated, of: {', '.join(WHAT)} (default: all for jsonl and openmetrics, "
                        "probes for csv, which takes one)")
    parser.add_argument("--from", dest="t_from", metavar="TIME", help=f"only from TIME: {HELP}")
    parser.add_argument("--to", dest="t_to", metavar="TIME", help="only until TIME (same forms)")
    parser.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of stdout")
    return parser


def _run_export(args: argparse.Namespace) -> int:
    from lpxtop.record.export import export
    from lpxtop.record.reading import Recording
    from lpxtop.record.timeparse import parse_moment

    with Recording(args.file) as recording:
        span = recording.time_range()
        if span is None:
            raise ConfigError(f"{args.file}: the recording holds no readable events")
        t_from = parse_moment(args.t_from, *span) if args.t_from else None
        t_to = parse_moment(args.t_to, *span) if args.t_to else None
        what = [w.strip() for w in args.what.split(",") if w.strip()] if args.what else None
        out = open(args.out, "w", encoding="utf-8", newline="") if args.out else sys.stdout  # noqa: SIM115
        try:
            counts = export(recording, out, fmt=args.format, what=what, t_from=t_from, t_to=t_to)
        except BrokenPipeError:  # `lpxtop export … | head`: the reader has what it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_OK
        finally:
            if args.out:
                out.close()
        damage = recording.damage_summary()
    if damage:
        print(f"lpxtop export: {args.file}: {damage}", file=sys.stderr)
    if args.out:
        summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing in that range"
        print(f"lpxtop export: wrote {summary} to {Path(args.out)}", file=sys.stderr)
    return EXIT_OK
