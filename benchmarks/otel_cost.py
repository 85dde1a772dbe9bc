"""What OpenTelemetry export (--otlp, lpxtop/otel) costs above the headless engine, and whether it moves a
probe's timestamps (target: <= 0.3 % of one core at 4 endpoints, default settings).

4 simulated servers in their own processes; three kinds of child process, run in alternating rounds so that
the machine's drift hits them alike:

  engine      build_engine(URLs) started: the headless engine alone
  otlp        the same engine with an OtlpPipeline exporting to a receiver in this script (a healthy backend;
              the receiver decodes every request with opentelemetry-proto, in this process, not measured)
  otlp-hung   the same, the receiver holding every request 30 s (a backend that hangs: each export waits
              for the 10 s timeout, the queue fills, spans are dropped and counted)

Each child's CPU (user + system, psutil) over --seconds after a warm-up, as % of one core; for the
pipelines also their worker thread's own CPU (time.thread_time: export, encoding, spans, metrics), which
does not drift with the machine. And lpxtop's own lateness while each probe ran (the engine's record:
the loop's worst timer lag per probe, lpxtop/engine/probe/clientlimit.py), p50/p99/max, which is how a delayed
timestamp would show.

`--micro` prints the per-record figures lpxtop/otel/aggregate.py cites instead: one histogram record in the
SDK against lpxtop's aggregation, one span built and encoded, one metrics export encoded.

usage: python benchmarks/otel_cost.py [--seconds 60] [--rounds 2] [--warmup 10] [--micro]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.sim_processes import REPO, sim_processes, stop_process

CHILD = """
import json, sys, time
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
mode, receiver, seconds, urls = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
sys.setswitchinterval(0.001)  # as the dashboard, once and load set it (lpxtop/cli/common.py SWITCH_INTERVAL_S)
engine = build_engine(endpoints_from_urls(urls), discover=False)
pipeline = None
if mode != "engine":
    from lpxtop.otel.pipeline import OtlpPipeline
    from lpxtop.otel.settings import OtlpSettings
    pipeline = OtlpPipeline(OtlpSettings(endpoint=receiver))
    pipeline.attach(engine)
    pipeline.start()
engine.start()
print("ready", flush=True)
time.sleep(5)
engine.lateness.clear()  # start-up (imports, first connections) is not the steady state
cpu0 = pipeline.worker_cpu_s if pipeline else 0.0
t0 = time.monotonic()
time.sleep(seconds)
elapsed = time.monotonic() - t0
lags = sorted(lag / 1e6 for _, lag, _, _ in engine.lateness)
out = {"probes": len(lags), "lag_ms": lags}
if pipeline is not None:
    out["worker_pct"] = 100 * (pipeline.worker_cpu_s - cpu0) / elapsed
    out["status"] = pipeline.status()
print("RESULT " + json.dumps(out), flush=True)
engine.stop()
if pipeline is not None:
    pipeline.close(timeout=1.0)
"""


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def run_child(mode: str, receiver_url: str, urls: list[str], args: argparse.Namespace, workdir: Path) -> dict:
    log = workdir / f"{mode}.log"
    with open(log, "w+") as out:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, receiver_url, str(args.seconds), *urls],
                                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while "ready" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
            child = psutil.Process(proc.pid)
            time.sleep(5)  # as the child: its measured span begins now
            c0, t0 = cpu_s(child), time.monotonic()
            while "RESULT" not in log.read_text() and proc.poll() is None and time.monotonic() - t0 < args.seconds + 30:
                time.sleep(0.2)
            cpu = 100 * (cpu_s(child) - c0) / (time.monotonic() - t0)
            found = re.search(r"RESULT (.*)", log.read_text())
            if not found:
                raise RuntimeError(f"{mode}: no result: {log.read_text()[-800:]}")
            result = json.loads(found.group(1))
            result.update(kind=mode, cpu_pct=cpu, rss_mb=child.memory_info().rss / 2**20)
            return result
        finally:
            stop_process(proc)


def micro() -> int:
    """The per-record costs (CPU time, this process)."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from lpxtop.model.probe import Sample
    from lpxtop.otel import semconv as sc
    from lpxtop.otel.aggregate import Aggregator, attrs_key
    from lpxtop.otel.measures import EndpointInfo
    from lpxtop.otel.pipeline import OtlpPipeline
    from lpxtop.otel.settings import OtlpSettings

    info = EndpointInfo(name="gpu:8000", address="127.0.0.1", port=8000, provider="vllm", request_model="m",
                        max_tokens=16)
    attrs = {**info.operation_attrs(), sc.RESPONSE_MODEL: "m"}
    n = 20_000
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench")
    hist = meter.create_histogram("h", unit="s", explicit_bucket_boundaries_advisory=list(sc.DURATION_BOUNDS))
    t = time.process_time()
    for _ in range(n):
        hist.record(0.012, attrs)
    sdk_us = (time.process_time() - t) / n * 1e6
    agg = Aggregator()
    metric = sc.STABLE_METRICS["tpoc"]
    key = attrs_key(attrs)
    t = time.process_time()
    for _ in range(n):
        agg.record(metric, 0.012, key, 0)
    ours_us = (time.process_time() - t) / n * 1e6
    t = time.process_time()
    for _ in range(n // 16):
        agg.record_many(metric, [0.012] * 15, attrs_key(attrs), 0)
    many_us = (time.process_time() - t) / (n // 16 * 15) * 1e6
    print(f"one histogram record: SDK {sdk_us:.2f} us, lpxtop {ours_us:.2f} us ({sdk_us / ours_us:.0f}x), "
          f"lpxtop per value of a 15-gap probe {many_us:.2f} us (CPU time; this machine's load applies)")
    class Nowhere:  # the encoding is measured here; sending is the receiver's business
        def export(self, *a, **kw):
            return None

        def shutdown(self):
            pass

    pipeline = OtlpPipeline(OtlpSettings(endpoint="http://127.0.0.1:9"), span_exporter=Nowhere(),
                            metric_exporter=Nowhere())
    now = time.time()
    samples = [Sample(endpoint="gpu:8000", wall_time=now, start_ns=0, ok=True, model="m", response_id=f"r{i}",
                      ttft_ms=40.0, e2e_ms=100.0, token_event_ms=tuple(40.0 + 4 * k for k in range(16)),
                      tokens_per_event=(1,) * 16, output_tokens=16, prompt_tokens=20, finish_reason="length",
                      http_status=200, sent_wall_ns=time.time_ns()) for i in range(2000)]
    t = time.process_time()
    spans = [pipeline.spans.request(s, info) for s in samples]
    build_us = (time.process_time() - t) / len(samples) * 1e6
    t = time.process_time()
    body = encode_spans(spans).SerializePartialToString()
    encode_us = (time.process_time() - t) / len(spans) * 1e6
    t = time.process_time()
    for s in samples:
        pipeline.measures.request(s, info, 0)
    measure_us = (time.process_time() - t) / len(samples) * 1e6
    t = time.process_time()
    data, points = pipeline.metrics_data()
    metrics_bytes = encode_metrics(data).SerializePartialToString()
    metrics_ms = (time.process_time() - t) * 1e3
    print(f"one probe: its metrics {measure_us:.1f} us, its span built {build_us:.1f} us, encoded {encode_us:.1f} us "
          f"({len(body) / len(spans):.0f} bytes)")
    print(f"one metrics export of one endpoint's series: {points} points, {len(metrics_bytes)} bytes, encoded in "
          f"{metrics_ms:.2f} ms")
    pipeline._closed = True  # nothing to send
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run (default 60)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three runs, alternating (default 2)")
    parser.add_argument("--micro", action="store_true", help="only the per-record figures (a few seconds)")
    args = parser.parse_args()
    if args.micro:
        return micro()
    from tests.support.otlp_receiver import start_receiver, stop_receiver

    healthy = start_receiver()
    hung = start_receiver(mode="slow", delay_s=30.0)
    print(f"4 simulated servers; engine defaults (a probe and a /metrics scrape every 2 s per endpoint); OTLP "
          f"defaults (export every 10 s); {args.seconds:g} s per run after a warm-up, {args.rounds} round(s)",
          flush=True)
    results: list[dict] = []
    try:
        with sim_processes(4, model=lambda i: f"m{i}") as sims, tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for mode, url in (("engine", ""), ("otlp", healthy.url), ("otlp-hung", hung.url)):
                    res = run_child(mode, url, sims.urls, args, Path(tmp))
                    results.append(res)
                    lags = res["lag_ms"]
                    extra = ""
                    if "status" in res:
                        st = res["status"]
                        extra = (f"  worker {res['worker_pct']:.3f} %  spans sent {st['exported_spans']}, dropped "
                                 f"{st['dropped_spans']}, failed exports {st['failed_exports']}")
                    print(f"  round {r + 1} {mode:9s} {res['cpu_pct']:5.2f} % of a core  RSS {res['rss_mb']:5.1f} MB  "
                          f"loop lag per probe p50 {pct(lags, 0.5):.2f} p99 {pct(lags, 0.99):.2f} max "
                          f"{max(lags, default=float('nan')):.2f} ms ({res['probes']} probes){extra}", flush=True)
    finally:
        stop_receiver(healthy)
        stop_receiver(hung)

    def of(kind: str, key: str) -> list[float]:
        return [x[key] for x in results if x["kind"] == kind]

    engine = statistics.mean(of("engine", "cpu_pct"))
    for kind in ("otlp", "otlp-hung"):
        cpu = statistics.mean(of(kind, "cpu_pct"))
        worker = statistics.mean(of(kind, "worker_pct"))
        lags = sorted(v for x in results if x["kind"] == kind for v in x["lag_ms"])
        print(f"{kind:9s} {cpu:5.2f} % vs engine alone {engine:5.2f} %: {cpu - engine:+5.2f} % of a core "
              f"(target <= 0.30; run-to-run spread applies); its worker thread alone {worker:.3f} %; "
              f"loop lag p99 {pct(lags, 0.99):.2f} ms")
    lags = sorted(v for x in results if x["kind"] == "engine" for v in x["lag_ms"])
    print(f"engine    loop lag p99 {pct(lags, 0.99):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
