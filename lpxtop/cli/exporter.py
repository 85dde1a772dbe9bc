"""`lpxtop exporter URL... [--config FILE] --listen 127.0.0.1:9464`: the engine, headless, served to Prometheus."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from lpxtop.checks import ConfigError
from lpxtop.cli.arguments import ArgumentParser
from lpxtop.cli.common import add_endpoint_flags, engine_for, load_endpoints, seconds
from lpxtop.cli.otlp import add_otlp_flags, otlp_for, stop_otlp
from lpxtop.engine.traces import add_traces_flags, start_traces, stop_traces
from lpxtop.http import is_loopback

DESCRIPTION = """\
Run lpxtop's engine without a screen and serve what it measures to Prometheus: /metrics (Prometheus
text format; OpenMetrics when the scraper asks for it) and a blackbox-style /probe?target=URL&model=M
that runs one probe per scrape, within the scrape timeout.

Families (base units, `_total` counters; labels host, endpoint, model, server_kind):
  lpxtop_probe_{ttft,itl,tpot,e2e}_seconds   histograms (bucket edges: [exporter] ttft_buckets = [...] ...)
  lpxtop_probe_success, lpxtop_endpoint_up, lpxtop_endpoint_status{status}, lpxtop_endpoint_info{url}
  lpxtop_probes_total, lpxtop_probe_errors_total{kind}, lpxtop_probe_output_tokens_total,
  lpxtop_probes_client_limited_total   probes during which lpxtop itself was late
  lpxtop_probe_window_{ttft,itl,tpot,e2e}_seconds{percentile}   the dashboard's own window percentiles
  lpxtop_ttft_gap_seconds{method}   time outside the engine, only where it compares (joined_spans, probe_only, window_means)
  lpxtop_server_requests_{waiting,running}, lpxtop_server_kv_cache_usage_ratio, ...
  lpxtop_server_{ttft,queue_time,prefill_time,decode_time,itl,tpot,e2e}_mean_seconds   exact (Δsum/Δcount)
  lpxtop_agent_step_seconds, lpxtop_agent_time_to_tool_call_seconds   histograms (--probe agent)
  lpxtop_chain_{queue,prefill,outside}_seconds   histograms from the probes' own server spans (--traces-listen)
  lpxtop_agent_steps_total, lpxtop_agent_errors_total{kind}
  lpxtop_gpu_memory_{used,total}_bytes, lpxtop_gpu_process_memory_used_bytes{pid,process,endpoint,endpoints}
  lpxtop_port_state{port,state}, lpxtop_leftover_processes, lpxtop_alert{kind,severity}

/probe makes this host send requests to any URL a scraper names: the exporter listens on 127.0.0.1
unless --listen says otherwise; on a shared network, keep it behind a firewall or turn /probe off
(--no-probe-endpoint). Scrape configs, a systemd unit and rules: docs/prometheus/ in lpxtop's sources.
"""

EPILOG = """\
examples:
  lpxtop exporter 127.0.0.1:8000 --listen 127.0.0.1:9464
  lpxtop exporter --config lpxtop.toml --host-label gpu-node-3
  curl -s 127.0.0.1:9464/metrics | grep lpxtop_probe_ttft
  curl -s '127.0.0.1:9464/probe?target=http://127.0.0.1:8000/v1'

exit status: 0 after SIGTERM/SIGINT, 2 for usage or config errors (or an address it cannot listen on).
"""


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=f"lpxtop {command}", description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_endpoint_flags(parser)
    add_exporter_flags(parser, with_listen=True)
    add_otlp_flags(parser)
    add_traces_flags(parser)
    return parser


def add_exporter_flags(parser: argparse.ArgumentParser, *, with_listen: bool) -> None:
    g = parser.add_argument_group("exporter (also [exporter] in the config file)")
    if with_listen:
        g.add_argument("--listen", metavar="HOST:PORT",
                       help="address for /metrics and /probe (default 127.0.0.1:9464; :9464 listens on every "
                       "interface, which lets anyone who reaches it use /probe)")
    g.add_argument("--host-label", metavar="NAME", help="the `host` label on every series (default: this host's name)")
    g.add_argument("--no-probe-endpoint", action="store_true", help="answer /probe with 404")
    g.add_argument("--probe-timeout", type=seconds, metavar="DURATION",
                   help="a /probe's time when the scraper sends no X-Prometheus-Scrape-Timeout-Seconds (default 10s)")


def exporter_settings(args: argparse.Namespace, table: dict, config_path: str | None, listen: str | None):
    """ExporterSettings from the `[exporter]` table and the flags (flags win)."""
    from lpxtop.export.settings import parse_listen, settings_from_table

    overrides: dict = {
        "host_label": args.host_label,
        "probe_enabled": False if args.no_probe_endpoint else None,
        "probe_timeout_s": args.probe_timeout,
    }
    if listen is not None:
        try:
            overrides["listen_host"], overrides["listen_port"] = parse_listen(listen)
        except ConfigError as exc:
            raise ConfigError(f"--listen: {exc}") from None
    return settings_from_table(table, config_path, **overrides)


def start_exporter(engine, settings):
    """An Exporter for `engine`, listening; ConfigError (exit 2) when the address cannot be bound."""
    from lpxtop.export.exporter import Exporter

    exporter = Exporter(engine, settings)
    try:
        exporter.start()
    except OSError as exc:
        exporter.stop()
        raise ConfigError(f"cannot listen on {settings.listen}: {exc.strerror or exc} "
                          "(another exporter there? pick another port with --listen)") from None
    if settings.probe_enabled and not is_loopback(settings.listen_host):
        print(f"lpxtop: warning: /probe on {settings.listen} lets anyone who reaches this address make this host "
              "send requests; restrict access, or pass --no-probe-endpoint", file=sys.stderr)
    return exporter


def run(command: str, args: argparse.Namespace) -> int:
    file_config = load_endpoints(args)
    settings = exporter_settings(args, file_config.exporter, args.config, args.listen)
    engine = engine_for(args, file_config)
    otlp = otlp_for(engine, args, file_config)
    traces = start_traces(engine, args, file_config.traces, endpoints=file_config.endpoints)
    try:
        exporter = start_exporter(engine, settings)
    except ConfigError:
        stop_otlp(otlp, quiet=True)
        stop_traces(traces, quiet=True)
        raise
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        engine.start()
        count = len(file_config.endpoints)
        what = f"{count} endpoint(s)" if count else "the inference servers it finds on this host"
        print(f"lpxtop exporter: serving {exporter.url}/metrics for {what}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        exporter.stop()
        engine.stop()
        stop_otlp(otlp)
        stop_traces(traces, prog="lpxtop exporter")
    return 0
