"""`lpxtop fleet --prometheus URL [--match '{job="lpxtop"}']`: the dashboard on every host Prometheus knows."""

from __future__ import annotations

import argparse
import os
import sys

from lpxtop.cli.arguments import ArgumentParser, env_name
from lpxtop.cli.common import logs_held_while_drawing, positive_int, seconds

DESCRIPTION = """\
Open the dashboard on a whole fleet, read back from Prometheus: one row per host x endpoint of every
lpxtop exporter Prometheus scrapes (TTFT p50/p99 by histogram_quantile over the window, error %,
queue, KV cache, GPU memory), worst first, with a host column and the same detail screen (its charts
come from query_range). Servers Prometheus scrapes directly (vLLM, SGLang, TGI, llama.cpp, ...) on
hosts without an lpxtop exporter show their own queue, KV and TTFT; GPUs come from lpxtop, or from
dcgm-exporter / nvitop-exporter series.

Prometheus down, slow or refusing a query shows as a status line; every query has a time limit and a
cap on the series it may return. `--print-queries` prints every PromQL query, to paste into Grafana.
"""

EPILOG = """\
examples:
  lpxtop fleet --prometheus http://prom:9090
  lpxtop fleet --prometheus http://prom:9090 --match '{job="lpxtop"}' --window 10m
  lpxtop fleet --prometheus http://prom:9090 --json      # the fleet once, like `lpxtop once --json`
  lpxtop fleet --print-queries --match '{job="lpxtop"}'

exit status (--json): 0 every endpoint up, 1 an endpoint is down, 2 usage error, 3 Prometheus did not answer.
"""


def build_parser(command: str) -> argparse.ArgumentParser:
    parser = ArgumentParser(prog=f"lpxtop {command}", description=DESCRIPTION, epilog=EPILOG,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    g = parser.add_argument_group("Prometheus")
    g.add_argument("-p", "--prometheus", metavar="URL", help="Prometheus' base URL (http://prom:9090)")
    g.add_argument("--match", metavar="SELECTOR", default="",
                   help="label matchers for the lpxtop exporters' series, e.g. '{job=\"lpxtop\"}' (default: all)")
    g.add_argument("--servers-match", metavar="SELECTOR", default="",
                   help="label matchers for servers and GPU exporters without lpxtop (default: all)")
    g.add_argument("--window", default="5m", metavar="DURATION",
                   help="window of the table's figures, as PromQL writes it (default 5m, lpxtop's own window)")
    g.add_argument("--chart-rate", default="1m", metavar="DURATION",
                   help="rate window of each chart point (default 1m)")
    g.add_argument("--refresh", type=seconds, default=5.0, metavar="DURATION",
                   help="ask Prometheus this often (default 5s)")
    g.add_argument("--timeout", type=seconds, default=5.0, metavar="DURATION",
                   help="time limit of each query (default 5s)")
    g.add_argument("--max-series", type=positive_int, default=2000, metavar="N",
                   help="series kept per query; more are cut, and said so (default 2000)")
    g.add_argument("--prometheus-token-env", type=env_name, metavar="VAR",
                   help="environment variable holding a bearer token for Prometheus (never shown)")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the fleet once as JSON (schema 1, each endpoint "
                   "with a host) and exit")
    o.add_argument("--print-queries", action="store_true", help="print every PromQL query and exit")
    o.add_argument("--theme", help="colour theme (as for the dashboard)")
    return parser


def settings_from_args(args: argparse.Namespace):
    from lpxtop.checks import ConfigError
    from lpxtop.fleet.client import normalize_base
    from lpxtop.fleet.promql import FleetQueries, SelectorError, check_duration, parse_matchers
    from lpxtop.fleet.source import FleetSettings
    from lpxtop.textsafe import register_secret

    try:
        queries = FleetQueries(match=parse_matchers(args.match), servers=parse_matchers(args.servers_match),
                               window=check_duration(args.window), chart_rate=check_duration(args.chart_rate))
    except SelectorError as exc:
        raise ConfigError(str(exc)) from None
    if args.print_queries and not args.prometheus:
        return FleetSettings(prometheus_url="http://prometheus:9090", queries=queries)
    if not args.prometheus:
        raise ConfigError("--prometheus URL is needed (e.g. lpxtop fleet --prometheus http://127.0.0.1:9090)")
    try:
        url = normalize_base(args.prometheus)
    except ValueError as exc:
        raise ConfigError(f"--prometheus: {exc}") from None
    headers: tuple[tuple[str, str], ...] = ()
    if args.prometheus_token_env:
        token = os.environ.get(args.prometheus_token_env)
        if not token:
            raise ConfigError(f"--prometheus-token-env: ${args.prometheus_token_env} is not set")
        register_secret(token)
        headers = (("Authorization", f"Bearer {token}"),)
    return FleetSettings(prometheus_url=url, queries=queries, refresh_s=args.refresh, timeout_s=args.timeout,
                         max_series=args.max_series, headers=headers)


def fleet_json(settings, snapshot) -> dict:
    """`once --json`'s schema (each endpoint with a host), plus where the figures came from."""
    doc = snapshot.to_json()
    problems = [a.message for a in snapshot.alerts if a.kind.startswith("prometheus") and a.severity != "info"]
    doc["source"] = "fleet"
    doc["prometheus"] = {
        "url": settings.prometheus_url,
        "match": settings.queries.match,
        "window": settings.queries.window,
        "status": problems[0] if problems else "ok",
    }
    return doc


def run(command: str, args: argparse.Namespace) -> int:
    from lpxtop.fleet.source import FleetSource
    from lpxtop.jsonout import dumps
    from lpxtop.textsafe import printable

    settings = settings_from_args(args)
    if args.print_queries:
        for key, query in settings.queries.instant().items():
            print(f"{key}: {query}")
        for key, query in settings.queries.charts().items():
            print(f"chart {key}: {query}")
        return 0
    source = FleetSource(settings)
    if args.json:
        snapshot = source.collect_once()
        print(dumps(fleet_json(settings, snapshot), indent=2))  # valid JSON whatever numbers Prometheus holds
        unreachable = any(a.kind == "prometheus" and a.severity == "critical" for a in snapshot.alerts)
        if unreachable:
            print(f"lpxtop: {printable(snapshot.alerts[0].message)}", file=sys.stderr)
            return 3
        return 1 if any(v.status == "down" for v in snapshot.endpoints) else 0
    return _open_ui(source, args)


def _open_ui(source, args: argparse.Namespace) -> int:
    from lpxtop.ui.app import create_app
    from lpxtop.ui.theming import ThemeError

    try:
        app = create_app(source, theme=args.theme, readonly=True, on_ready=source.start)
    except ThemeError as exc:
        print(f"lpxtop: {exc}", file=sys.stderr)
        return 2
    try:
        with logs_held_while_drawing():
            app.run()
    finally:
        source.stop()
    return 0
