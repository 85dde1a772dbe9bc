"""A fleet of any size as Prometheus would answer the fleet view's queries: for the build's scaling test
(tests/unit/test_fleet_scale.py) and its benchmark (benchmarks/fleet_build.py)."""

from __future__ import annotations

from lpxtop.fleet.build import Reading
from lpxtop.fleet.client import Answer, Series
from lpxtop.fleet.promql import (
    GAUGES,
    MEASURES,
    QUANTILES,
    TPOT_LOW_QUANTILES,
)

ENDPOINTS_PER_HOST = 4


def synthetic_reading(rows: int, *, servers: int | None = None) -> Reading:
    """`rows` exporter rows (hosts of ENDPOINTS_PER_HOST endpoints, one GPU each), every per-row query
    answered for each, and `servers` (default rows // 4) servers Prometheus scrapes without lpxtop."""
    servers = rows // 4 if servers is None else servers
    answers: dict[str, list[Series]] = {}

    def put(key: str, value: float, **labels: str) -> None:
        answers.setdefault(key, []).append(Series(labels, [(1000.0, value)]))

    for i in range(rows):
        host, endpoint = f"host{i // ENDPOINTS_PER_HOST:05d}", f"e{i % ENDPOINTS_PER_HOST}"
        ip = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
        row = {"host": host, "endpoint": endpoint}
        put("rows", 1, **row, model=f"model-{i % 7}", server_kind="vllm", instance=f"{ip}:9464")
        put("up_now", 1, **row)
        put("status", 1, **row, status="up")
        put("urls", 1, **row, url=f"http://127.0.0.1:{8000 + i % ENDPOINTS_PER_HOST}/v1")
        put("exporters_up", 1, instance=f"{ip}:9464", job="lpxtop")
        put("probes", 100 + i % 13, **row)
        put("errors", i % 3, **row, kind="http_5xx")
        put("tokens", 1000, **row)
        for measure in MEASURES:
            for label, q in QUANTILES + (TPOT_LOW_QUANTILES if measure == "tpot" else ()):
                put(f"{measure}_{label}", 0.01 + q / 10 + i * 1e-6, **row)
            put(f"{measure}_mean", 0.05, **row)
            put(f"{measure}_count", 96, **row)
        for key in GAUGES:
            put(key, i % 5, **row)
        put("gpu_per_endpoint", 2**30, **row)
        if i % ENDPOINTS_PER_HOST == 0:
            gpu = {"host": host, "gpu": "gpu0", "uuid": f"GPU-{i:08d}", "name": "H100"}
            put("gpu_used", 40 * 2**30, **gpu)
            put("gpu_total", 80 * 2**30, **gpu)
            put("gpu_util", 0.5, **gpu)
            put("ports", 1, **row, port="8000", state="ok")
        put("gpu_processes", 2**30, host=host, gpu="gpu0", pid=str(1000 + i), process="vllm", endpoint=endpoint)
    for j in range(servers):
        instance = f"172.16.{j // 256 % 256}.{j % 256}:8000"
        put("server_waiting", j % 4, __name__="vllm:num_requests_waiting", instance=instance, model_name="m")
        put("server_running", 1, __name__="vllm:num_requests_running", instance=instance, model_name="m")
        put("server_kv_usage", 0.3, __name__="vllm:gpu_cache_usage_perc", instance=instance, model_name="m")
        put("server_up", 1, instance=instance, job="vllm")
        put("server_ttft_p50:vllm", 0.05, instance=instance)
        put("server_ttft_p99:vllm", 0.2, instance=instance)
    return Reading(taken_at=1000.0, answers={k: Answer(v) for k, v in answers.items()})


def s(value: float, **labels: str) -> Series:
    return Series(labels, [(1.0, value)])



def reading(**answers: list[Series]) -> Reading:
    return Reading(taken_at=1000.0, answers={k: Answer(v) for k, v in answers.items()})



def row(host: str, endpoint: str, **extra: str) -> dict[str, str]:
    return {"host": host, "endpoint": endpoint, **extra}



def lpxtop_reading() -> Reading:
    a, b = row("hostA", "e1"), row("hostB", "e1")
    quantiles = {f"ttft_{q}": [s(v, **a), s(v * 4, **b)] for q, v in
                 (("p50", 0.03), ("p95", 0.045), ("p99", 0.049), ("max", 0.05))}
    return reading(
        # hostA's endpoint shows twice: once from before its labels were known (the window keeps both)
        rows=[s(1, **a, model="", server_kind="unknown", instance="10.0.0.1:9464"),
              s(1, **a, model="m1", server_kind="vllm", instance="10.0.0.1:9464"),
              s(1, **b, model="m2", server_kind="sglang", instance="10.0.0.2:9464")],
        up_now=[s(1, **a)],  # hostB's exporter stopped answering
        status=[s(1, **a, status="degraded")],
        urls=[s(1, **a, url="http://127.0.0.1:8000/v1"), s(1, **b, url="http://127.0.0.1:30000/v1")],
        exporters_up=[s(1, instance="10.0.0.1:9464", job="lpxtop"), s(0, instance="10.0.0.2:9464", job="lpxtop")],
        probes=[s(100, **a)], errors=[s(3, **a, kind="http_5xx"), s(1, **a, kind="refused")],
        ttft_mean=[s(0.031, **a)], ttft_count=[s(96, **a)],
        tpot_p50=[s(0.01, **a)], tpot_p05=[s(0.008, **a)], tpot_p01=[s(0.005, **a)], tpot_min=[s(0.004, **a)],
        tpot_mean=[s(0.0105, **a)], tpot_count=[s(96, **a)],
        requests_waiting=[s(4, **a)], kv_cache_usage=[s(0.5, **a)], server_metrics_up=[s(1, **a)],
        server_ttft_p50_s=[s(0.02, **a)],
        gpu_per_endpoint=[s(2**30, **a)],
        # servers Prometheus scrapes directly: one lpxtop already probes (hostA's 127.0.0.1:8000 seen from
        # its exporter's address), one it does not
        server_waiting=[s(7, __name__="vllm:num_requests_waiting", instance="10.0.0.1:8000", model_name="m1"),
                        s(2, __name__="sglang:num_queue_reqs", instance="10.0.0.3:30000", model_name="big"),
                        s(1, __name__="sglang:num_queue_reqs", instance="10.0.0.3:30000", model_name="big", tp_rank="1")],
        server_kv_usage=[s(0.7, __name__="sglang:token_usage", instance="10.0.0.3:30000", model_name="big")],
        server_up=[s(1, instance="10.0.0.3:30000", job="sglang")],
        **{"server_ttft_p50:sglang": [s(0.25, instance="10.0.0.3:30000")]},
        **quantiles,
    )
