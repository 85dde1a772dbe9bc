"""client_limited: a probe during which lpxtop itself was late (its loop, its interpreter lock, its wait
for a CPU) is flagged, counted, and left out of the percentiles; a quiet run flags nothing. The client
is made late for real: a thread that holds the interpreter lock, a process pinned to one CPU beside
spinners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

HOLD_S = 0.03


def _calibrated_hold() -> int:
    """The n for which sum(range(n)), one C call that never lets go of the interpreter lock, takes HOLD_S
    on a free CPU (the fastest of three timings; a busy machine only makes the hold longer)."""
    n = 100_000
    fastest = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        sum(range(n))
        fastest = min(fastest, time.perf_counter() - began)
    return max(10_000, int(n * HOLD_S / max(1e-6, fastest)))


def _holder(holds: list[float]):
    """A thread body that holds the interpreter lock ~HOLD_S out of every HOLD_S + 10 ms, as a long parse
    on another thread would. Each hold's length is kept in `holds`; one that came out short (the CPU ran
    faster than when calibrated) makes the next longer, so the test never rests on one timing."""
    n = _calibrated_hold()

    def hold(stop: threading.Event) -> None:
        nonlocal n
        while not stop.is_set():
            began = time.perf_counter()
            sum(range(n))
            took = time.perf_counter() - began
            holds.append(took)
            if took < 0.8 * HOLD_S:
                n = int(n * HOLD_S / max(took, 1e-6))
            time.sleep(0.01)

    return hold


def _run(config: SimConfig, probes: int, settings: EngineSettings, during=None):
    """Probe until `probes` have finished (with `during(stop)` running on a thread all along); the view."""
    with start_sim_in_thread(config) as sim:
        engine = Engine([endpoint(sim.url, model="m", max_tokens=8, interval_s=0.05)], settings)
        samples: list = []
        engine.add_listener(lambda e: samples.append(e.sample) if type(e).__name__ == "SampleEvent" else None)
        stop = threading.Event()
        if during is not None:
            threading.Thread(target=during, args=(stop,), daemon=True).start()
        try:
            with engine:
                deadline = time.monotonic() + 20
                while len(samples) < probes and time.monotonic() < deadline:
                    time.sleep(0.02)
                engine.set_paused(True)
                time.sleep(0.6)  # the next publish
                return engine.snapshot().endpoints[0], list(engine.lateness)
        finally:
            stop.set()


def test_a_thread_holding_the_interpreter_lock_makes_probes_client_limited():
    holds: list[float] = []
    hold = _holder(holds)

    # each probe lasts ~80 ms: it cannot miss a 30-ms hold that comes every 40 ms
    config = SimConfig(model="m", ttft_ms=60, itl_ms=2, jitter=0.0)
    view, lateness = _run(config, 4, EngineSettings(scrape_metrics=False), during=hold)
    assert view.probes_ok >= 4 and view.probes_client_limited == view.probes_sent, (lateness, holds)
    assert all(s.client_limited for s in view.samples)
    assert max(lag for _, lag, _, _ in lateness) > 10e6
    # counted in JSON; with no other probe in the window the percentiles come from these, marked so
    doc = view.to_json()
    assert doc["probes"]["client_limited"] == view.probes_sent
    assert view.percentiles_with_client_limited and doc["latency_includes_client_limited"] is True
    assert doc["latency_ms"]["ttft"] is not None


def test_agent_steps_are_flagged_like_chat_probes():
    """The agent probe's steps are watched as chat probes are: a held interpreter lock flags them, they
    are counted, and their times are marked as coming from client-limited steps."""
    holds: list[float] = []
    hold = _holder(holds)

    config = SimConfig(model="m", ttft_ms=60, itl_ms=2, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        engine = Engine([endpoint(sim.url, model="m", max_tokens=8, interval_s=0.05, probes=("agent",))],
                        EngineSettings(scrape_metrics=False))
        steps: list = []
        engine.add_listener(lambda e: steps.append(e.step) if type(e).__name__ == "AgentStepEvent" else None)
        stop = threading.Event()
        threading.Thread(target=hold, args=(stop,), daemon=True).start()
        try:
            with engine:
                deadline = time.monotonic() + 20
                while len(steps) < 3 and time.monotonic() < deadline:
                    time.sleep(0.02)
                engine.set_paused(True)
                time.sleep(0.6)
                agent = engine.snapshot().endpoints[0].agent
                lateness = list(engine.lateness)
        finally:
            stop.set()
    why = ([(s.error_kind, s.step_ms, s.client_limited) for s in steps], lateness, [round(h * 1e3, 1) for h in holds])
    assert len(steps) >= 3 and all(s.client_limited for s in steps), why
    assert agent.steps_client_limited == agent.steps_sent and agent.percentiles_with_client_limited
    assert agent.to_json()["steps_client_limited"] == agent.steps_sent and agent.step_ms is not None


def test_a_quiet_run_flags_nothing():
    config = SimConfig(model="m", ttft_ms=5, itl_ms=1, jitter=0.0)
    for _attempt in range(2):  # the machine's own load can make lpxtop late for real: one rerun
        view, lateness = _run(config, 8, EngineSettings(scrape_metrics=False))
        if view.probes_client_limited == 0:
            break
    assert view.probes_ok >= 8 and view.probes_client_limited == 0, lateness
    assert view.ttft_ms is not None and view.ttft_ms.count == view.probes_ok


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat") or not hasattr(os, "sched_setaffinity"),
                    reason="needs Linux schedstat and CPU affinity")
def test_waiting_for_a_cpu_makes_probes_client_limited():
    # `once` in a child pinned to one CPU beside a process spinning on that CPU at a higher priority (the
    # child is niced): the scheduler favours a thread that mostly sleeps, so an equal spinner alone
    # hardly delays it; a server at normal priority saturating the CPUs beside lpxtop is this case.
    code = """
import json, os, sys, time
cpu = sorted(os.sched_getaffinity(0))[0]
os.sched_setaffinity(0, {cpu})
from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint
with start_sim_in_thread(SimConfig(model="m", ttft_ms=40, itl_ms=5, jitter=0.0)) as sim:
    spinners = []
    for _ in range(1):
        pid = os.fork()
        if pid == 0:
            end = time.monotonic() + 20
            while time.monotonic() < end:
                pass
            os._exit(0)
        spinners.append(pid)
    os.nice(19)
    try:
        engine = Engine([endpoint(sim.url, model="m", max_tokens=8)], EngineSettings(scrape_metrics=False))
        snap = engine.collect_once(samples=3, timeout_s=20, interval_s=0.05)
    finally:
        for pid in spinners:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
view = snap.endpoints[0]
print(json.dumps({"probes": view.to_json()["probes"], "lateness": list(engine.lateness)}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["probes"]["sent"] == 3 and doc["probes"]["client_limited"] >= 2, doc
