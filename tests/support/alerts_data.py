"""Records for the alert tests: a GPU at a memory level, an endpoint with KV-cache figures, a snapshot."""

from __future__ import annotations

from lpxtop.model import (
    EndpointConfig,
    EndpointView,
    GpuDevice,
    GpuSnapshot,
    ServerMetrics,
    Snapshot,
)

GIB = 2**30
T0 = 1_700_000_000.0



def gpu(used_gib: float, total_gib: float = 80, *, t: float | None = None, procs=(), migs=()) -> GpuSnapshot:
    dev = GpuDevice(
        index=0,
        name="NVIDIA H100",
        uuid="GPU-0",
        mem_used_bytes=int(used_gib * GIB),
        mem_total_bytes=int(total_gib * GIB),
        processes=tuple(procs),
        mig_devices=tuple(migs),
    )
    return GpuSnapshot(status="ok", devices=(dev,), collected_at=t)



def endpoint(name="vllm", port=8000, kv: float | None = None, preempt: float | None = None) -> EndpointView:
    server = ServerMetrics(kind="vllm", kv_cache_usage=kv, preemptions_total=preempt)
    return EndpointView(
        config=EndpointConfig(name=name, url=f"http://127.0.0.1:{port}/v1"),
        status="up",
        model="m",
        server_kind="vllm",
        probes_sent=0,
        probes_ok=0,
        probes_failed=0,
        errors={},
        ttft_ms=None,
        itl_ms=None,
        tpot_ms=None,
        e2e_ms=None,
        output_tokens_per_s=None,
        output_tokens=None,
        output_tokens_approx=False,
        last_error=None,
        last_error_time=None,
        samples=(),
        server=server,
    )



def snap(t: float, *, g: GpuSnapshot | None = None, host=None, endpoints=(), ports=()) -> Snapshot:
    return Snapshot(
        wall_time=t,
        host_name="box",
        version="0",
        started_at=T0,
        paused=False,
        interval_s=1.0,
        endpoints=tuple(endpoints),
        gpu=g if g is not None else GpuSnapshot(status="unavailable: test"),
        host=host,
        ports=tuple(ports),
    )



def kinds(alerts) -> list[tuple[str, str]]:
    return [(a.severity, a.kind) for a in alerts]
