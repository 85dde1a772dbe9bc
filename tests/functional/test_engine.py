"""The Engine on its own thread against the simulated server: snapshots, commands, bounded tasks."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.ports import free_port
from tests.support.sim import endpoint
from tests.support.waiting import wait_for


def test_engine_probes_publishes_and_takes_commands():
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=10, itl_ms=2)) as sim:
        engine = Engine([endpoint(sim.url, model=None, interval_s=0.1)], EngineSettings())
        with engine:
            snap = wait_for(lambda: (s := engine.snapshot()).endpoints and s.endpoints[0].probes_ok >= 3 and s)
            view = snap.endpoints[0]
            assert view.status == "up" and view.model == "sim-a"  # model taken from /v1/models
            assert view.ttft_ms.p50 > 0 and view.itl_ms is not None and view.e2e_ms.p99 >= view.ttft_ms.p50
            engine.set_paused(True)
            wait_for(lambda: engine.snapshot().paused)
            wait_for(lambda: not engine.snapshot().endpoints[0].in_flight)
            paused_count = engine.snapshot().endpoints[0].probes_sent
            time.sleep(0.5)  # five intervals: unpaused, about five probes would go
            assert engine.snapshot().endpoints[0].probes_sent <= paused_count + 1
            engine.reset()
            wait_for(lambda: engine.snapshot().endpoints[0].probes_sent == 0)
            engine.set_paused(False)
            wait_for(lambda: engine.snapshot().endpoints[0].probes_sent >= 2)
            engine.set_interval(5.0)
            wait_for(lambda: engine.snapshot().interval_s == 5.0)
        assert not any(t.name == "lpxtop-engine" for t in threading.enumerate())


def test_commands_end_the_wait_between_probes_at_once():
    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=5, itl_ms=1)) as sim:
        engine = Engine([endpoint(sim.url, model="sim-a", interval_s=30.0)], EngineSettings(scrape_metrics=False))
        with engine:

            def sent() -> int:
                endpoints = engine.snapshot().endpoints
                return endpoints[0].probes_sent if endpoints else 0

            wait_for(lambda: sent() == 1 and not engine.snapshot().endpoints[0].in_flight)
            engine.set_interval(0.25)  # the loop sleeps for 30 s: the new interval must not wait for that
            wait_for(lambda: sent() >= 3, timeout=5)
            engine.set_interval(60.0)
            time.sleep(0.5)
            engine.set_paused(True)
            wait_for(lambda: engine.snapshot().paused)
            paused_at = sent()
            engine.set_paused(False)  # resuming starts a probe now, not after the 60-s wait
            wait_for(lambda: sent() > paused_at, timeout=5)


def test_a_down_endpoint_is_down_and_does_not_leak_tasks():
    url = f"http://127.0.0.1:{free_port()}/v1"
    engine = Engine([endpoint(url, model="m", interval_s=0.05)], EngineSettings())
    with engine:
        wait_for(lambda: engine.snapshot().endpoints and engine.snapshot().endpoints[0].probes_sent >= 4)
        first = _task_count(engine)
        wait_for(lambda: engine.snapshot().endpoints[0].probes_sent >= 20, timeout=15)
        # a leak would add a task or more per failed probe (16 here); a few come and go with scrapes
        assert _task_count(engine) <= first + 3
        view = engine.snapshot().endpoints[0]
        assert view.status == "down" and view.errors == {"refused": view.probes_failed}
        assert view.last_error.startswith("refused")


def test_flapping_endpoint_recovers():
    port = free_port()
    ep = endpoint(f"http://127.0.0.1:{port}/v1", model="m", interval_s=0.25)
    engine = Engine([ep], EngineSettings())
    with engine:
        wait_for(lambda: engine.snapshot().endpoints and engine.snapshot().endpoints[0].status == "down")
        with start_sim_in_thread(SimConfig(model="m", ttft_ms=5, itl_ms=1), port=port):
            wait_for(lambda: engine.snapshot().endpoints[0].status in ("up", "degraded"))
            wait_for(lambda: engine.snapshot().endpoints[0].status == "up")
        wait_for(lambda: engine.snapshot().endpoints[0].status == "down")


def test_window_is_bounded():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=1, itl_ms=0.5)) as sim:
        engine = Engine([endpoint(sim.url, model="m", interval_s=0.05, max_tokens=4)], EngineSettings(max_samples=5))
        with engine:
            wait_for(lambda: engine.snapshot().endpoints and engine.snapshot().endpoints[0].probes_sent >= 8)
            assert len(engine.snapshot().endpoints[0].samples) == 5


def test_collect_once_runs_n_probes_per_endpoint():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=3, itl_ms=1)) as a, \
         start_sim_in_thread(SimConfig(model="n", ttft_ms=3, itl_ms=1)) as b:
        engine = Engine([endpoint(a.url, name="a", model=None), endpoint(b.url, name="b", model=None)])
        snap = engine.collect_once(samples=3, timeout_s=30)
    assert [(e.name, e.model, e.probes_sent, e.status) for e in snap.endpoints] == [
        ("a", "m", 3, "up"), ("b", "n", 3, "up")]


def _task_count(engine: Engine) -> int:
    async def count():
        return len(asyncio.all_tasks())

    return engine._loop_thread.run(count(), 5)


def test_a_server_that_refuses_stream_options_is_probed_without_it():
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=2, itl_ms=1, reject_stream_options=True)) as sim:
        engine = Engine([endpoint(sim.url, model="m", interval_s=0.25, max_tokens=6)], EngineSettings())
        with engine:
            view = wait_for(lambda: (s := engine.snapshot()).endpoints and s.endpoints[0].probes_ok >= 2
                            and s.endpoints[0])
        # no usage chunk then: the count comes from the events, marked approximate
        assert view.probes_failed == 0 and view.output_tokens_approx
        assert view.output_tokens.p50 == 6


def test_collect_once_joins_gpu_processes_to_the_endpoint_they_serve(monkeypatch):
    """`lpxtop once` reads NVML before the port check has said which PID serves which endpoint; the
    GPU's process list must still name the endpoint (it did not on a real H200). Only the pynvml
    functions are fake: the sim, its listening socket, the port check and the join are real."""
    import os

    from lpxtop.engine.gpu.collector import GpuCollector
    from lpxtop.engine.system.ports import PortMonitor
    from tests.support.nvml import GIB, FakeDriver, FakeGpu, proc

    # the sim runs in a thread of this process, so this PID is the one holding its port
    FakeDriver([FakeGpu(compute=[proc(os.getpid(), 3 * GIB)])]).install(monkeypatch)
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=2, itl_ms=1)) as sim:
        engine = Engine([endpoint(sim.url, name="a", model=None)], gpu=GpuCollector(), ports=PortMonitor())
        snap = engine.collect_once(samples=1, timeout_s=30)
    (port,) = snap.ports
    assert port.pid == os.getpid() and port.endpoint == "a"
    (process,) = snap.gpu.devices[0].processes
    assert (process.pid, process.used_bytes, process.endpoint) == (os.getpid(), 3 * GIB, "a")


def test_collect_once_gives_a_failed_last_scrape_one_more_try():
    """`once` reports what the last scrape saw: a passing failure there (an HTTP 500 here, while the
    probe runs) must not blank the server's figures. Real sockets: the sim answers the probes, a
    stdlib server /metrics."""
    import http.server

    from lpxtop.engine.scrape.servers import ServerScraper

    page = (Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
            / "llamacpp-server-0c1e5709-local-capture-after-load.txt").read_bytes()
    codes: list[int] = []
    probed = threading.Event()

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            code, body = (200, page) if probed.is_set() else (500, b"busy")  # failing while the probe runs
            codes.append(code)
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    metrics = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    try:
        with start_sim_in_thread(SimConfig(model="m", ttft_ms=80, itl_ms=1)) as sim:
            ep = endpoint(sim.url, model="m", metrics_url=f"http://127.0.0.1:{metrics.server_port}/metrics")
            engine = Engine([ep], scraper_factory=ServerScraper)
            engine.add_listener(lambda event: probed.set() if type(event).__name__ == "SampleEvent" else None)
            snap = engine.collect_once(samples=1, timeout_s=30)
    finally:
        metrics.shutdown()
        metrics.server_close()
    server = snap.endpoints[0].server
    assert codes[0] == 500 and codes[-1] == 200, codes
    assert server is not None and (server.status, server.kind) == ("ok", "llamacpp"), server
    assert server.requests_running is not None


def test_listeners_get_every_input_and_a_failing_listener_is_dropped():
    from lpxtop.model.events import SampleEvent, ScrapeEvent, SnapshotEvent

    seen: list = []
    calls = {"bad": 0}

    def bad(event) -> None:
        calls["bad"] += 1
        raise RuntimeError("a reader's bug")

    with start_sim_in_thread(SimConfig(model="sim-a", ttft_ms=5, itl_ms=1)) as sim:
        from lpxtop.engine.scrape.servers import ServerScraper

        engine = Engine([endpoint(sim.url, model="sim-a", interval_s=0.25)], EngineSettings(),
                        scraper_factory=ServerScraper)
        engine.add_listener(bad)
        engine.add_listener(seen.append)
        with engine:
            wait_for(lambda: sum(isinstance(e, SampleEvent) for e in seen) >= 3
                     and any(isinstance(e, ScrapeEvent) for e in seen)
                     and any(isinstance(e, SnapshotEvent) for e in seen))
    samples = [e for e in seen if isinstance(e, SampleEvent)]
    assert all(e.endpoint == "sim" and e.sample.ok for e in samples)
    assert calls["bad"] == 1  # dropped after its first failure; the others kept getting events


def test_once_reports_the_server_across_the_run_from_scrapes_of_its_own():
    """What the server showed while `once` probed (last, max, mean of running and
    waiting over scrapes on their own schedule), not one reading taken after lpxtop's probe ended."""
    from lpxtop.engine.scrape.servers import ServerScraper

    # 4 closed-loop clients in waves: 4 running all along, 5 while the probe has its slot
    config = SimConfig(model="m", ttft_ms=10, itl_ms=2, max_num_seqs=8, wave_load=(4, 40))
    with start_sim_in_thread(config) as sim:
        ep = endpoint(sim.url, model="m", max_tokens=8)
        # ~2 s of probing: the scrapes come at random gaps of 0.25 s on average, so a run of 4 quick probes
        # (~0.5 s) had only 2 scrapes about one time in three
        snap = Engine([ep], scraper_factory=ServerScraper).collect_once(samples=8, timeout_s=30, interval_s=0.25)
    view = snap.endpoints[0]
    summary = view.server_summary
    assert view.probes_ok == 8 and summary is not None and summary.scrapes >= 3, summary
    running = summary.requests_running
    # Between two waves the batch is empty for about one engine step (~2 ms of each ~80 ms wave): a scrape
    # may land there and read 0 running (about one run in ten on a busy machine). Allow one such scrape.
    floor = 4 * (summary.scrapes - 1) / summary.scrapes
    assert floor <= running.mean <= 5 and running.max in (4, 5) and running.count == summary.scrapes, running
    doc = view.to_json()["server_while_probing"]
    assert doc["scrapes"] == summary.scrapes and set(doc["requests_running"]) == {"last", "max", "mean"}
    assert doc["kv_cache_usage"]["max"] <= 1.0


def test_once_reads_the_servers_histograms_after_its_last_probe(monkeypatch):
    """`once`'s server-side figures (the exact mean TTFT, the gap) must cover every probe of the run: its
    last scrape reads the latency histograms whatever their 10 s schedule. Found against real vLLM
    (benchmarks/reference.py): a 17 s `once` reported the server's TTFT over its first ~10 s only. The
    schedule is stretched here so that without that last read the window would end after the first scrapes."""
    from lpxtop.engine.scrape import tracker as server_tracker
    from lpxtop.engine.scrape.servers import ServerScraper

    monkeypatch.setattr(server_tracker, "HISTOGRAMS_EVERY_S", 3600.0)
    probes = 8
    with start_sim_in_thread(SimConfig(model="m", ttft_ms=20, itl_ms=2, jitter=0.0)) as sim:
        ep = endpoint(sim.url, model="m", max_tokens=4)
        snap = Engine([ep], scraper_factory=ServerScraper).collect_once(samples=probes, timeout_s=30, interval_s=0.1)
    view = snap.endpoints[0]
    ttft = view.server.server_ttft_ms
    assert view.probes_ok == probes and ttft is not None
    # every probe's first token, bar one whose first token the first scrape may not have preceded
    assert probes - 1 <= ttft.count <= probes, ttft


def test_an_engine_not_yet_started_shows_its_endpoints_pending():
    """The dashboard's first frame comes before the engine starts: it lists the endpoints it was given
    (pending, every figure unknown), never "No endpoints to watch yet"."""
    engine = Engine([endpoint(f"http://127.0.0.1:{free_port()}/v1", name="a"),
                     endpoint(f"http://127.0.0.1:{free_port()}/v1", name="b")])
    snap = engine.snapshot()
    assert [(v.name, v.status, v.probes_sent, v.ttft_ms) for v in snap.endpoints] == [
        ("a", "pending", 0, None), ("b", "pending", 0, None)]
    assert engine.warming_up()
