"""A simulated OpenAI-compatible inference server that behaves like vLLM 0.32 (the demo and test bench).

- config.py     SimConfig: timing, capacity, start-up faults
- scheduler.py  continuous batching, KV cache and preemption, background load (one asyncio loop);
                prefix_cache.py: prefix-cache hits; text.py: toy tokenizer and generated words
- handlers.py   HTTP endpoints; streaming.py: one response (SSE or JSON) and its faults; wire.py: JSON shapes
- metrics.py    /metrics with vLLM V1's names, labels and buckets
- faults.py     run-time faults (Python, or POST /sim/faults); records.py: what was sent, and when
- spans.py      vLLM's per-request `llm_request` spans, sent to --otlp-traces-endpoint (OTLP/HTTP)
- server.py     SimServer; thread.py: start_sim_in_thread() -> SimHandle (`lpxtop sim`: lpxtop/cli/sim.py)
"""

from lpxtop.sim.config import SimConfig
from lpxtop.sim.faults import Faults
from lpxtop.sim.records import SimRecord
from lpxtop.sim.server import SimServer
from lpxtop.sim.thread import SimHandle, SimThread, start_sim_in_thread

__all__ = ["Faults", "SimConfig", "SimHandle", "SimRecord", "SimServer", "SimThread", "start_sim_in_thread"]
