"""client_limited: a probe during which lpxtop itself was late (its loop, its wait for a CPU) is flagged,
counted, and left out of the percentiles; a quiet run flags nothing. The client is made late for real: a
listener that holds the engine's loop, a process pinned to one CPU beside spinners."""

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
FREE_S = 0.005  # between two holds: shorter than a probe's stream of tokens, so that some of its reads wait


class _LoopHolder:
    """Holds the engine's loop HOLD_S out of every HOLD_S + FREE_S, as a long parse on the loop or a slow
    listener would: an engine listener that sleeps when handed its own mark, posted from a thread."""

    def __init__(self) -> None:
        self.holds: list[float] = []
        self.engine: Engine | None = None

    def __call__(self, event: object) -> None:
        if event is self:
            began = time.perf_counter()
            time.sleep(HOLD_S)
            self.holds.append(time.perf_counter() - began)

    def attach(self, engine: Engine) -> None:
        self.engine = engine
        engine.add_listener(self)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and self.engine is not None:
            self.engine.post_event(self)  # type: ignore[arg-type]
            time.sleep(HOLD_S + FREE_S)


def _run(config: SimConfig, probes: int, settings: EngineSettings, during=None):
    """Probe until `probes` have finished (with `during(stop)` running on a thread all along); the view."""
    with start_sim_in_thread(config) as sim:
        engine = Engine([endpoint(sim.url, model="m", max_tokens=8, interval_s=0.05)], settings)
        samples: list = []
        engine.add_listener(lambda e: samples.append(e.sample) if type(e).__name__ == "SampleEvent" else None)
        stop = threading.Event()
        if during is not None:
            during.attach(engine)
            threading.Thread(target=during.run, args=(stop,), daemon=True).start()
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


def test_a_held_engine_loop_makes_probes_client_limited():
    hold = _LoopHolder()

    # each probe streams its tokens for ~16 ms: some of its reads arrive while the loop is held
    config = SimConfig(model="m", ttft_ms=60, itl_ms=2, jitter=0.0)
    view, lateness = _run(config, 4, EngineSettings(scrape_metrics=False), during=hold)
    assert view.probes_ok >= 4 and view.probes_client_limited == view.probes_sent, (lateness, hold.holds)
    assert all(s.client_limited for s in view.samples)
    assert max(lag for _, lag, _, _ in lateness) > 10e6
    # counted in JSON; with no other probe in the window the percentiles come from these, marked so
    doc = view.to_json()
    assert doc["probes"]["client_limited"] == view.probes_sent
    assert view.percentiles_with_client_limited and doc["latency_includes_client_limited"] is True
    assert doc["latency_ms"]["ttft"] is not None


def test_agent_steps_are_flagged_like_chat_probes():
    """The agent probe's steps are watched as chat probes are: a held loop flags them, they are counted,
    and their times are marked as coming from client-limited steps."""
    hold = _LoopHolder()

    config = SimConfig(model="m", ttft_ms=60, itl_ms=2, jitter=0.0)
    with start_sim_in_thread(config) as sim:
        engine = Engine([endpoint(sim.url, model="m", max_tokens=8, interval_s=0.05, probes=("agent",))],
                        EngineSettings(scrape_metrics=False))
        steps: list = []
        engine.add_listener(lambda e: steps.append(e.step) if type(e).__name__ == "AgentStepEvent" else None)
        stop = threading.Event()
        hold.attach(engine)
        threading.Thread(target=hold.run, args=(stop,), daemon=True).start()
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
    why = ([(s.error_kind, s.step_ms, s.client_limited) for s in steps], lateness,
           [round(h * 1e3, 1) for h in hold.holds])
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
