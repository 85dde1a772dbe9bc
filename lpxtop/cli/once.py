"""`lpxtop once`: probe each endpoint N times and print a report (a table, or JSON schema 1). Never opens the
dashboard, never imports Textual."""

from __future__ import annotations

import argparse
import sys
import time

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import (
    SWITCH_INTERVAL_S,
    add_endpoint_flags,
    duration_between,
    engine_for,
    load_endpoints,
    positive_int,
)
from lpxtop.cli.otlp import add_otlp_flags, otlp_for, stop_otlp
from lpxtop.engine.traces import add_traces_flags, finish_once, start_traces, stop_traces
from lpxtop.jsonout import dumps


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="lpxtop once",
        description="Probe each endpoint N times, at random gaps averaging --interval (0.2 s unless given),\n"
        "while scraping each server's /metrics on a schedule of its own; then print a report (a table,\n"
        "or JSON schema 1 with --json): the probes' percentiles, and what the server showed across the\n"
        "run (last, max and mean of running, waiting and KV use). Never opens the dashboard.\n\n"
        "exit status: 0 every endpoint answered, 1 an endpoint is down, 2 usage or config error.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", "--samples", type=positive_int, default=3, metavar="N",
                        help="probes per endpoint (default 3)")
    parser.add_argument("--json", action="store_true", help="print JSON (schema 1, see docs/json.md)")
    parser.add_argument("--deadline", type=duration_between(0.1, 86_400.0), default=120.0, metavar="DURATION",
                        help="end within this long in all, discovery included, and report what was "
                        "measured by then (default 2m)")
    parser.add_argument("--record", metavar="FILE",
                        help="also record the probes and readings to FILE (lpxtop replay/export read it)")
    add_endpoint_flags(parser)
    add_otlp_flags(parser)
    add_traces_flags(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    from lpxtop.report import exit_status, render_table

    file_config = load_endpoints(args)
    engine = engine_for(args, file_config)
    # as the dashboard does: a thread that wakes with bytes to stamp waits ~1 ms for the lock, not 5
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    otlp = otlp_for(engine, args, file_config)
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
            stop_otlp(otlp, quiet=True)
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
        stop_otlp(otlp)
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
