"""Records for the energy tests: an endpoint with a token counter, a GPU with an energy counter."""

from __future__ import annotations

from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.gpu import GpuDevice, GpuProcess
from lpxtop.model.server import ServerMetrics
from lpxtop.model.snapshot import EndpointView


def view(name: str, tokens: float | None, scraped_at: float, status: str = "ok") -> EndpointView:
    return EndpointView(
        config=EndpointConfig(name=name, url="http://127.0.0.1:8000/v1"), status="up", model="m",
        server_kind="vllm", probes_sent=0, probes_ok=0, probes_failed=0, errors={}, ttft_ms=None, itl_ms=None,
        tpot_ms=None, e2e_ms=None, output_tokens_per_s=None, output_tokens=None, output_tokens_approx=False,
        last_error=None, last_error_time=None, samples=(),
        server=ServerMetrics(kind="vllm", status=status, scraped_at=scraped_at, generation_tokens_total=tokens),
    )



def gpu(index: int, energy_j: float | None, power_w: float | None = None, pids: tuple = (), endpoint=None,
        uuid: str | None = None) -> GpuDevice:
    procs = tuple(GpuProcess(pid=p, name="python", used_bytes=1, endpoint=endpoint) for p in pids)
    return GpuDevice(index=index, name="GPU", uuid=uuid or f"GPU-{index}", energy_j=energy_j, power_w=power_w,
                     processes=procs, vendor="nvidia")
