"""`lpxtop demo`: simulated inference servers on loopback, a simulated GPU, and the real engine.

The servers are real HTTP on 127.0.0.1 (random free ports), run by lpxtop itself in a background thread,
with a background load that rises and falls so the numbers move. `g` in the dashboard (or --surge)
triples the load and makes the simulated GPU's memory climb, to show the early warnings.
The second server is also probed with agent steps (a tool call, a 30 ms tool, the answer; now and then
a bad tool call), and a third plays the agent platforms: a Dify agent app (`api = "dify"`), a Dify
workflow timed node by node (`api = "dify-workflow"`) and a Coze bot (`api = "coze"`), so the agent
view has data for each. The simulators send their per-request spans to a trace receiver lpxtop runs
for the demo (as `--traces-listen` does), so the Chain tab and the exact Gap have data too (when
opentelemetry-proto is installed: lpxtop[otel]).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lpxtop.config import normalize_url
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.sim.config import SimConfig, load_function
from lpxtop.sim.thread import start_sim_in_thread

if TYPE_CHECKING:
    from lpxtop.engine import Engine

SURGE_FACTOR = 3.0
TRACES_DELAY_S = 0.5  # how often the simulators send their spans (vLLM with OTEL_BSP_SCHEDULE_DELAY=500)


def _surging_load(low: float, high: float, period_s: float, surge: threading.Event) -> Callable[[float], float]:
    base = load_function((low, high, period_s))
    assert base is not None
    return lambda t: base(t) * (SURGE_FACTOR if surge.is_set() else 1.0)


def demo_sim_configs(surge: threading.Event, traces_url: str | None = None) -> list[tuple[str, SimConfig]]:
    """Two servers that differ the way real ones do: a bigger batch and cache, and a smaller, flakier one.
    `traces_url`: where each sends its request spans (vLLM's `llm_request`)."""
    spans = {"otlp_traces_endpoint": traces_url, "otlp_schedule_delay_s": TRACES_DELAY_S} if traces_url else {}
    return [(name, replace(config, **spans)) for name, config in _sim_configs(surge)]


def _sim_configs(surge: threading.Event) -> list[tuple[str, SimConfig]]:
    return [
        ("vllm-sim-a", SimConfig(model="sim-llama-3.1-8b", ttft_ms=35.0, itl_ms=11.0, max_num_seqs=16,
                                 kv_tokens=24_000, seed=1, background_load=_surging_load(2, 18, 90, surge))),
        ("vllm-sim-b", SimConfig(model="sim-qwen2.5-7b", ttft_ms=55.0, itl_ms=16.0, max_num_seqs=8,
                                 kv_tokens=12_000, fail_rate=0.02, seed=2, tool_fault_rate=0.04,
                                 background_load=_surging_load(1, 10, 60, surge))),
        ("dify-app-sim", SimConfig(model="sim-dify-agent", ttft_ms=45.0, itl_ms=14.0, max_num_seqs=4,
                                   kv_tokens=8_000, seed=3, dify_tool_latency_ms=120.0,
                                   background_load=_surging_load(0, 3, 75, surge))),
    ]


# How the demo probes each simulated server (beyond the interval): the agent steps' settings, and more
# endpoints on the same server (the sim serves every platform's API: lpxtop/sim/handlers.py).
DEMO_PROBES: dict[str, dict] = {
    "vllm-sim-b": {"probes": ("chat", "agent"), "tool_latency_s": 0.03},
    "dify-app-sim": {"api": "dify", "probes": ("agent",)},
}
DEMO_MORE: dict[str, tuple[tuple[str, dict], ...]] = {
    "dify-app-sim": (
        ("dify-flow-sim", {"api": "dify-workflow", "probes": ("agent",), "inputs": (("query", "{prompt}"),)}),
        ("coze-bot-sim", {"api": "coze", "probes": ("agent",), "bot_id": "7379462189365198898"}),
    ),
}


@dataclass(frozen=True)
class Demo:
    """The demo's engine (not yet started) and its load surge switch (`g` in the dashboard: `create_app`'s
    `demo`)."""

    engine: Engine
    surge: Callable[[bool], None]


@contextlib.contextmanager
def start_demo(
    *, interval_s: float = 1.0, surge: bool = False, readonly: bool = False, gpu_surge_gib_s: float = 1.2
) -> Iterator[Demo]:
    """Start the simulated servers; a Demo: the (not yet started) Engine watching them and the surge switch."""
    from lpxtop.cli.assemble import build_engine
    from lpxtop.engine.gpu import SimulatedGpuCollector

    surge_flag = threading.Event()
    with contextlib.ExitStack() as stack:
        feed = _trace_feed()
        traces_url = f"http://127.0.0.1:{feed.settings.port}/v1/traces" if feed is not None else None
        sims = []
        endpoints = []
        for name, config in demo_sim_configs(surge_flag, traces_url):
            handle = stack.enter_context(start_sim_in_thread(config))
            sims.append(handle)
            endpoints.append(EndpointConfig(name=name, url=normalize_url(handle.url), interval_s=interval_s,
                                            max_tokens=24, **DEMO_PROBES.get(name, {})))
            for more, settings in DEMO_MORE.get(name, ()):
                endpoints.append(EndpointConfig(name=more, url=normalize_url(handle.url), interval_s=interval_s,
                                                max_tokens=24, **settings))
        gpu = SimulatedGpuCollector(kv_usage=lambda: max(h.server.kv_cache_usage for h in sims),
                                    surge_rate_bytes_s=gpu_surge_gib_s * 2**30)

        def set_surge(on: bool) -> None:
            if on:
                surge_flag.set()
            else:
                surge_flag.clear()
            gpu.surge(on)

        engine = build_engine(endpoints, gpu=gpu, readonly=readonly)
        if feed is not None:
            feed.attach(engine, endpoints)
            feed.start(wait=False)  # its process spawns beside the first frame; the first spans may be lost
            stack.callback(feed.stop)
        if surge:
            set_surge(True)
        try:
            yield Demo(engine, set_surge)
        finally:
            engine.stop()


def _trace_feed():
    """A ChainFeed on a free loopback port, or None without opentelemetry-proto (the demo then has no chain)."""
    import importlib.util
    import socket

    if importlib.util.find_spec("opentelemetry") is None or importlib.util.find_spec("opentelemetry.proto") is None:
        return None
    from lpxtop.engine.traces import ChainFeed, ReceiverSettings

    with socket.socket() as probe:  # a free port now; the receiver's process binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return ChainFeed(ReceiverSettings(host="127.0.0.1", port=port), wait_s=15.0)
