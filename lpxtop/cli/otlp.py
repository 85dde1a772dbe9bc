"""`--otlp` for every command that measures (the dashboard, demo, once, record, exporter, load), and starting
and stopping the pipeline beside an engine. Importing this module imports no OpenTelemetry package: the
pipeline (and the SDK) load only when export is on."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lpxtop.checks import ConfigError
from lpxtop.cli.common import duration_between
from lpxtop.otel.settings import MAX_INTERVAL_S, MIN_INTERVAL_S, parse_share, resolve

MISSING = ("OpenTelemetry export needs the OpenTelemetry packages, which this installation lacks: "
           "pip install 'lpxtop[otel]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)")


def _share(text: str) -> float:
    try:
        return parse_share(text, "--otlp-sample")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_otlp_flags(parser: argparse.ArgumentParser, *, load: bool = False) -> None:
    """The OpenTelemetry flags, in a group of their own."""
    g = parser.add_argument_group(
        "OpenTelemetry (also [otlp], [traces] in the config file; docs/opentelemetry.md)",
        "Probes out as GenAI metrics and spans, server spans in; needs lpxtop[otel].",
    )
    g.add_argument("--otlp", metavar="URL",
                   help="export to this OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318 ([otlp] enabled = true "
                   "takes $OTEL_EXPORTER_OTLP_ENDPOINT)")
    what = "load-test requests traced (default 0.01: 1 %%)" if load else "probes and agent steps traced (default 1: all)"
    g.add_argument("--otlp-sample", type=_share, metavar="SHARE",
                   help=f"share of {what}, e.g. 0.1 or 10%%; metrics always count every request")
    g.add_argument("--otlp-interval", type=duration_between(MIN_INTERVAL_S, MAX_INTERVAL_S), metavar="DURATION",
                   help="time between exports (default 10s)")


def otlp_settings(args: argparse.Namespace, table: dict | None, *, load: bool = False, where: str = "[otlp]"):
    """OtlpSettings from the flags and the `[otlp]` table (flags win); None when export is off."""
    return resolve(getattr(args, "otlp", None), table, sample=getattr(args, "otlp_sample", None),
                   interval_s=getattr(args, "otlp_interval", None), load=load, where=where)


def start_otlp(engine: Any, args: argparse.Namespace, table: dict | None = None, *, load: bool = False,
               **pipeline_kw: Any) -> Any | None:
    """The pipeline attached to `engine` (before it starts) and running, or None when export is off.
    ConfigError (exit 2) for a bad URL or table, or when the OpenTelemetry packages are not installed.
    `pipeline_kw` go to OtlpPipeline (the load test names its target and the model it asks for)."""
    settings = otlp_settings(args, table, load=load)
    if settings is None:
        return None
    try:
        from lpxtop.otel.pipeline import OtlpPipeline
    except ImportError:
        raise ConfigError(MISSING) from None
    pipeline = OtlpPipeline(settings, **pipeline_kw)
    pipeline.attach(engine)
    pipeline.start()
    return pipeline


def otlp_for(engine: Any, args: argparse.Namespace, file_config: Any | None) -> Any | None:
    """With --otlp (or an [otlp] table in `file_config`, a FileConfig): the pipeline beside the engine, attached
    before it starts; None when export is off (the OpenTelemetry packages are then never imported)."""
    table = file_config.otlp if file_config is not None else None
    if getattr(args, "otlp", None) is None and not table:
        return None
    return start_otlp(engine, args, table)


def stop_otlp(pipeline: Any | None, *, prog: str = "lpxtop", quiet: bool = False) -> None:
    """Export what is left (bounded) and say on stderr what was sent and lost."""
    if pipeline is None:
        return
    pipeline.close()
    if not quiet:
        print(f"{prog}: {pipeline.summary()}", file=sys.stderr)
