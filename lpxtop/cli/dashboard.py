"""The dashboard (`lpxtop [URL ...]`) and `lpxtop demo`: the engine, with what runs beside it (recording,
the exporter, OpenTelemetry export), shown by the Textual app. Textual is imported only when the app opens."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable
from typing import Any

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import (
    SWITCH_INTERVAL_S,
    add_record_flags,
    add_ui_flags,
    engine_for,
    load_endpoints,
    logs_held_while_drawing,
    seconds,
)
from lpxtop.cli.otlp import add_otlp_flags, otlp_for, stop_otlp
from lpxtop.engine.traces import start_traces, stop_traces


def build_parser(command: str) -> argparse.ArgumentParser:
    """`lpxtop demo`'s parser (the dashboard's own is the top-level one: lpxtop/cli/entry.py)."""
    parser = ArgumentParser(
        prog="lpxtop demo",
        description="Open the dashboard on simulated inference servers that lpxtop runs itself on "
        "127.0.0.1 (one also probed with agent steps, one playing a Dify agent app, a Dify workflow and a Coze "
        "bot), with load that rises and falls "
        "and a simulated GPU. No GPU, server or network needed. "
        "Press g in the dashboard to surge the load and provoke the warnings.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--surge", action="store_true", help="start with the load surge on")
    parser.add_argument("--interval", type=seconds, default=1.0, metavar="DURATION",
                        help="mean time between probes (default 1s)")
    add_ui_flags(parser)
    add_record_flags(parser)
    add_otlp_flags(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    """`lpxtop demo`."""
    from lpxtop.cli.demo import start_demo

    with start_demo(interval_s=args.interval, surge=args.surge, readonly=args.readonly) as demo:
        engine = demo.engine
        otlp = otlp_for(engine, args, None)
        recorder = start_recording(engine, args, {}, ())
        exporter = exporter_for(args, engine, {})
        try:
            return open_ui(engine, args, {}, recorder=recorder, demo=demo.surge)
        finally:
            stop_recording(recorder)
            if exporter is not None:
                exporter.stop()
            stop_otlp(otlp)


def run_dashboard(args: argparse.Namespace) -> int:
    """`lpxtop [URL ...]`: the dashboard on the endpoints given (or found)."""
    file_config = load_endpoints(args)
    engine = engine_for(args, file_config)
    otlp = otlp_for(engine, args, file_config)
    # the receiver's process spawns beside the first frame, not before it
    traces = start_traces(engine, args, file_config.traces, endpoints=file_config.endpoints, wait=False)
    recorder = start_recording(engine, args, file_config.record, file_config.endpoints)
    exporter = exporter_for(args, engine, file_config.exporter)
    try:
        return open_ui(engine, args, file_config.ui, recorder=recorder)
    finally:
        stop_recording(recorder)
        if exporter is not None:
            exporter.stop()
        stop_otlp(otlp)
        stop_traces(traces)


def exporter_for(args: argparse.Namespace, engine: Any, table: dict):
    """With --export ADDR: the exporter beside the dashboard's engine (before it starts, so it sees every probe)."""
    if not getattr(args, "export", None):
        return None
    from lpxtop.cli.exporter import exporter_settings, start_exporter

    args.host_label = args.no_probe_endpoint = args.probe_timeout = None
    return start_exporter(engine, exporter_settings(args, table, getattr(args, "config", None), args.export))


def start_recording(engine: Any, args: argparse.Namespace, table: dict, endpoints):
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

    return Recorder.start_for(engine, settings.target(), endpoints=endpoints, retention=settings.retention,
                              clean_dir=settings.cleans_directory)


def stop_recording(recorder: Any) -> None:
    """Close the recording and say on stderr where it went (or why it stopped early)."""
    if recorder is None:
        return
    recorder.close()
    if recorder.failure is not None:
        print(f"lpxtop: recording stopped: {recorder.failure}", file=sys.stderr)
    else:
        print(f"lpxtop: recorded to {recorder.path} (lpxtop replay {recorder.path})", file=sys.stderr)


def open_ui(engine: Any, args: argparse.Namespace, ui_settings: dict, *, recorder: Any = None,
            demo: Callable[[bool], None] | None = None) -> int:
    """Run the dashboard on `engine` until it is closed; the engine starts after the first frame. `recorder`:
    the recording beside it (REC, `b`); `demo`: the demo's load surge switch (`g`)."""
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    theme = args.theme or ui_settings.get("theme")
    refresh = args.refresh or ui_settings.get("refresh")
    try:
        app = create_app(engine, theme=theme, refresh_s=refresh, readonly=args.readonly,
                         on_ready=lambda: start_measuring(engine), recorder=recorder, demo=demo)
    except ThemeError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return 2
    # The probe loop runs on its own thread, but it shares the interpreter lock with rendering: a
    # shorter switch interval bounds how long a byte's timestamp can wait behind a repaint.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        with logs_held_while_drawing():
            app.run()
    finally:
        engine.stop()
    return 0


def start_measuring(engine: Any) -> None:
    """Start probing once the UI has drawn its first frame.

    Start-up leaves ~58,000 objects for the garbage collector; a full collection over them holds the
    interpreter lock for tens of milliseconds, which would land in some probe's timestamps. Freeze them
    now (gc.freeze, no walk), so later collections only scan what is new. No collection first: at this
    point it found nothing to free (0 unreachable objects in every measured start) and cost ~30-50 ms
    before the first probe could leave.
    """
    gc.freeze()
    engine.start()
