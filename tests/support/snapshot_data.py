"""A fixed, hand-built Snapshot for UI tests and SVG snapshots.

Every value is written here by hand (or by a plain formula over the sample index), with fixed wall
times, so screens rendered from it never change between runs. Three endpoints: one up with server
metrics (queue, KV cache, server TTFT), one degraded with errors (discovered), one down.
"""

from __future__ import annotations

from dataclasses import replace

from lpxtop.model.alerts import Alert
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot
from lpxtop.model.host import HostProcess, HostSnapshot
from lpxtop.model.ports import LeftoverProcess, PortStatus
from lpxtop.model.probe import Percentiles, Sample
from lpxtop.model.server import ServerLatency, ServerMetrics
from lpxtop.model.snapshot import EndpointView, ServerPoint, Snapshot

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
STARTED = NOW - 3723.0  # up 1h02m03s
GIB = 1024**3

# Values the tests expect to see on screen, written by hand from the definitions below.
EXPECTED = {
    "vllm-llama": {"ttft_p50": "142", "ttft_p99": "318", "tok_s": "84.2", "queue": "3/12", "kv": "91%", "gap": "~+35"},
    "sglang-qwen": {"ttft_p99": "1.52s", "err": "12%"},
    "llamacpp-local": {"err": "100%"},
}


def _ok_sample(endpoint: str, i: int, ttft: float, gap: float, tokens: int = 16) -> Sample:
    # Inter-token gaps vary around `gap` by a fixed pattern (-30 %, -15 %, 0, +15 %, +30 %, 0): an ITL spread.
    pattern = (0.7, 0.85, 1.0, 1.15, 1.3, 1.0)
    events = [ttft]
    for k in range(1, tokens):
        events.append(round(events[-1] + gap * pattern[(i + k) % len(pattern)], 3))
    events = tuple(events)
    return Sample(
        endpoint=endpoint,
        wall_time=NOW - 2.0 * (30 - i),
        start_ns=1_000_000_000 * i,
        ok=True,
        http_status=200,
        ttft_ms=ttft,
        first_event_ms=ttft - 5.0,
        e2e_ms=events[-1],
        token_event_ms=events,
        tokens_per_event=(1,) * tokens,
        output_tokens=tokens,
        finish_reason="length",
    )


def _failed_sample(endpoint: str, i: int, kind: str, message: str, status: int | None = None) -> Sample:
    return Sample(
        endpoint=endpoint,
        wall_time=NOW - 2.0 * (30 - i),
        start_ns=1_000_000_000 * i,
        ok=False,
        error_kind=kind,
        error_message=message,
        http_status=status,
    )


def _llama_view() -> EndpointView:
    name = "vllm-llama"
    # TTFT cycles 120,130,...,160 ms; one slow probe (318 ms) near the end. ITL 11.9 ms.
    samples = tuple(_ok_sample(name, i, 120.0 + 10.0 * (i % 5) if i != 27 else 318.0, 11.9) for i in range(30))
    history = tuple(
        ServerPoint(
            wall_time=NOW - 2.0 * (30 - i),
            requests_waiting=float(i % 4),
            requests_running=12.0,
            kv_cache_usage=0.80 + 0.0037 * i,
        )
        for i in range(30)
    )
    server = ServerMetrics(
        kind="vllm",
        requests_running=12.0,
        requests_waiting=3.0,
        kv_cache_usage=0.91,
        preemptions_total=0.0,
        # Every server TTFT in the window between 100 and 118 ms (a narrow range: the gap is an estimate
        # from the means, 145.93 - 110.6 = +35.3 ms, certainly within +27.9 ... +45.9 ms).
        server_ttft_ms=ServerLatency(
            p50=110.0, p99=117.9, count=480.0, mean=110.6, p50_range=(100.0, 113.2), p99_range=(111.0, 118.0),
            min_at_least=100.0, max_at_most=118.0,
        ),
        server_queue_ms=ServerLatency(
            p50=0.021, p99=0.4, count=480.0, mean=0.012, p50_range=(0.0, 0.021), p99_range=(0.012, 0.4),
            min_at_least=0.0, max_at_most=0.4,
        ),
        generation_tokens_per_s=1024.5,
        window_s=60.0,
    )
    return EndpointView(
        config=EndpointConfig(
            name=name,
            url="http://127.0.0.1:8000/v1",
            model="meta-llama/Llama-3.1-8B-Instruct",
            api_key_env="VLLM_API_KEY",
            headers=(("Authorization", "Bearer not-shown"),),
        ),
        status="up",
        model="meta-llama/Llama-3.1-8B-Instruct",
        server_kind="vllm",
        probes_sent=30,
        probes_ok=30,
        probes_failed=0,
        errors={},
        ttft_ms=Percentiles(p50=142.0, p95=300.0, p99=318.0, mean=150.6, max=318.0, count=30),
        itl_ms=Percentiles(p50=11.9, p95=11.9, p99=11.9, mean=11.9, max=11.9, count=450),
        tpot_ms=Percentiles(p50=11.9, p95=11.9, p99=11.9, mean=11.9, max=11.9, count=30),
        e2e_ms=Percentiles(p50=320.5, p95=480.0, p99=496.5, mean=329.1, max=496.5, count=30),
        output_tokens_per_s=Percentiles(p50=84.2, p95=84.2, p99=84.2, mean=84.2, max=84.2, count=30),
        output_tokens=Percentiles(p50=16.0, p95=16.0, p99=16.0, mean=16.0, max=16.0, count=30),
        output_tokens_approx=False,
        last_error=None,
        last_error_time=None,
        samples=samples,
        server=server,
        server_history=history,
    )


def _qwen_view() -> EndpointView:
    name = "sglang-qwen"
    failures = {
        6: ("http_5xx", "HTTP 503: Service Unavailable", 503),
        14: ("stream_cut", "connection closed before [DONE] after 7 events", None),
        21: ("http_5xx", "HTTP 500: Internal Server Error", 500),
    }
    samples = []
    for i in range(25):
        if i in failures:
            kind, message, status = failures[i]
            samples.append(_failed_sample(name, i + 5, kind, message, status))
        else:
            samples.append(_ok_sample(name, i + 5, 600.0 + 40.0 * (i % 7) + (900.0 if i == 18 else 0.0), 35.0, 24))
    history = tuple(
        ServerPoint(
            wall_time=NOW - 2.0 * (25 - i),
            requests_waiting=float(6 + i % 5),
            requests_running=32.0,
            kv_cache_usage=None,
        )
        for i in range(25)
    )
    server = ServerMetrics(kind="sglang", requests_running=32.0, requests_waiting=9.0, kv_cache_usage=None)
    return EndpointView(
        config=EndpointConfig(name=name, url="http://127.0.0.1:30000/v1", model="Qwen/Qwen2.5-7B", discovered=True),
        status="degraded",
        model="Qwen/Qwen2.5-7B",
        server_kind="sglang",
        probes_sent=25,
        probes_ok=22,
        probes_failed=3,
        errors={"http_5xx": 2, "stream_cut": 1},
        ttft_ms=Percentiles(p50=720.0, p95=1380.0, p99=1520.0, mean=768.4, max=1540.0, count=22),
        itl_ms=Percentiles(p50=35.0, p95=35.0, p99=35.0, mean=35.0, max=35.0, count=506),
        tpot_ms=Percentiles(p50=35.0, p95=35.0, p99=35.0, mean=35.0, max=35.0, count=22),
        e2e_ms=Percentiles(p50=1525.0, p95=2185.0, p99=2325.0, mean=1573.4, max=2345.0, count=22),
        output_tokens_per_s=Percentiles(p50=28.6, p95=28.6, p99=28.6, mean=28.6, max=28.6, count=22),
        output_tokens=Percentiles(p50=24.0, p95=24.0, p99=24.0, mean=24.0, max=24.0, count=22),
        output_tokens_approx=True,
        last_error="http_5xx: HTTP 500: Internal Server Error",
        last_error_time=samples[21].wall_time,
        samples=tuple(samples),
        server=server,
        server_history=history,
    )


def _llamacpp_view() -> EndpointView:
    name = "llamacpp-local"
    samples = tuple(
        _failed_sample(name, 20 + i, "refused", "connection refused by 127.0.0.1:8080 (nothing listens)")
        for i in range(10)
    )
    return EndpointView(
        config=EndpointConfig(name=name, url="http://127.0.0.1:8080/v1", model=None),
        status="down",
        model=None,
        server_kind="llamacpp",
        probes_sent=10,
        probes_ok=0,
        probes_failed=10,
        errors={"refused": 10},
        ttft_ms=None,
        itl_ms=None,
        tpot_ms=None,
        e2e_ms=None,
        output_tokens_per_s=None,
        output_tokens=None,
        output_tokens_approx=False,
        last_error="refused: connection refused by 127.0.0.1:8080 (nothing listens)",
        last_error_time=samples[-1].wall_time,
        samples=samples,
        server=ServerMetrics(kind="llamacpp", status="no /metrics: connection refused"),
        server_history=(),
    )


def _gpu() -> GpuSnapshot:
    return GpuSnapshot(
        status="ok",
        devices=(
            GpuDevice(
                index=0,
                name="NVIDIA H100 80GB HBM3",
                uuid="GPU-6f3c2a1e-0000-4000-8000-000000000000",
                util_pct=87.0,
                mem_used_bytes=int(78.1 * GIB),
                mem_total_bytes=80 * GIB,
                temp_c=64.0,
                power_w=412.0,
                power_limit_w=700.0,
                processes=(
                    GpuProcess(pid=4121, name="python3", used_bytes=int(70.1 * GIB), user="ml",
                               cmdline="python3 -m vllm.entrypoints.openai.api_server --port 8000",
                               endpoint="vllm-llama"),
                    GpuProcess(pid=3999, name="python", used_bytes=int(8.0 * GIB), user="ml",
                               cmdline="python -m vllm.entrypoints.openai.api_server --port 8001"),
                ),
            ),
            GpuDevice(
                index=1,
                name="NVIDIA L4",
                uuid="GPU-0a1b2c3d-0000-4000-8000-000000000001",
                util_pct=3.0,
                mem_used_bytes=int(1.2 * GIB),
                mem_total_bytes=24 * GIB,
                temp_c=41.0,
                power_w=17.0,
                power_limit_w=72.0,
            ),
        ),
        collected_at=NOW,
        driver_version="550.54.15",
    )


def _host() -> HostSnapshot:
    return HostSnapshot(
        cpu_pct=23.5,
        mem_used_bytes=41 * GIB,
        mem_total_bytes=62 * GIB,
        mem_available_bytes=21 * GIB,
        swap_used_bytes=int(0.5 * GIB),
        swap_total_bytes=8 * GIB,
        load_avg=(1.25, 0.98, 0.80),
        cpu_count=16,
        mem_pressure_avg10=0.4,
        processes=(
            HostProcess(endpoint="vllm-llama", pid=4121, name="python3", rss_bytes=int(3.2 * GIB), cpu_pct=104.0,
                        children=2),
            HostProcess(endpoint="sglang-qwen", pid=5150, status="denied"),
        ),
        collected_at=NOW,
    )


def _ports() -> tuple[PortStatus, ...]:
    return (
        PortStatus(
            port=8000,
            status="ok",
            detail="vLLM (PID 4121) serves meta-llama/Llama-3.1-8B-Instruct",
            pid=4121,
            process="python3",
            cmdline="python3 -m vllm.entrypoints.openai.api_server --port 8000",
            endpoint="vllm-llama",
            user="ml",
            started_at=NOW - 7200.0,
            server_kind="vllm",
        ),
        PortStatus(
            port=30000,
            status="conflict",
            detail="port 30000 is held by PID 5150 (python -m http.server 30000), not an inference server: "
            "stop it or start SGLang with --port 30001",
            pid=5150,
            process="python",
            cmdline="python -m http.server 30000",
            endpoint="sglang-qwen",
            user="dev",
            started_at=NOW - 600.0,
        ),
        PortStatus(
            port=8080,
            status="down",
            detail="nothing listens on 8080: start llama-server with --port 8080",
            endpoint="llamacpp-local",
        ),
    )


def _leftovers() -> tuple[LeftoverProcess, ...]:
    return (
        LeftoverProcess(
            pid=3999,
            name="python",
            user="ml",
            cmdline="python -m vllm.entrypoints.openai.api_server --port 8001",
            reason="holds 8.0 GiB on GPU 0 but listens on no port: stop it (T) to free the memory",
            gpu_used_bytes=8 * GIB,
            server_kind="vllm",
            started_at=NOW - 86400.0,
        ),
    )


def _alerts() -> tuple[Alert, ...]:
    return (
        Alert("critical", "gpu_memory", "GPU 0 memory 98% used (78.1 of 80.0 GiB): stop PID 3999 to free 8.0 GiB", "gpu0"),
        Alert("warning", "kv_saturated", "vllm-llama KV cache 91% full: requests will queue or be preempted", "vllm-llama"),
        Alert("info", "server_exited", "llamacpp-local: nothing listens on 8080", "llamacpp-local"),
    )


def fixed_snapshot() -> Snapshot:
    """The full picture: 3 endpoints, 2 GPUs with processes, host, ports (ok, conflict, down), a leftover, alerts."""
    return Snapshot(
        wall_time=NOW,
        host_name="gpu-box-01",
        version="0.1.0",
        started_at=STARTED,
        paused=False,
        interval_s=2.0,
        endpoints=(_llama_view(), _qwen_view(), _llamacpp_view()),
        gpu=_gpu(),
        host=_host(),
        ports=_ports(),
        leftovers=_leftovers(),
        alerts=_alerts(),
        seq=42,
    )


def empty_snapshot() -> Snapshot:
    """No endpoints, no GPU: what a first start without arguments looks like."""
    return Snapshot(
        wall_time=NOW,
        host_name="gpu-box-01",
        version="0.1.0",
        started_at=NOW - 5.0,
        paused=False,
        interval_s=2.0,
        gpu=GpuSnapshot(status="unavailable: NVML library not found (no NVIDIA driver)"),
        host=_host(),
        seq=1,
    )


def with_leftover(snapshot: Snapshot, pid: int, cmdline: str, user: str | None) -> Snapshot:
    """The same snapshot with one more leftover process (a real child process in the T/K tests)."""
    extra = LeftoverProcess(pid=pid, name="python", user=user, cmdline=cmdline, reason="test child: safe to stop")
    return replace(snapshot, leftovers=(extra, *snapshot.leftovers), seq=snapshot.seq + 1)
