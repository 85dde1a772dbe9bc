"""The soak's checks (benchmarks/soak.py) in a few seconds: endpoints that flap (a server stopped and
started again on its port, a port held by a process that never answers, faults in rotation, a port
nobody holds until a server comes) must leave lpxtop's tasks and file descriptors flat and every probe
loop alive. The hour-long run is `benchmarks/soak.py --minutes 60`."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

from benchmarks import soak
from lpxtop.cli.assemble import build_engine
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.ports import free_port
from tests.support.sim import endpoint

RUN_S = 4.4
REPORT_S = 0.4


def _squat(port: int, stop: threading.Event) -> threading.Thread:
    """A listener on `port` that accepts and never answers (it closes a connection once its peer has),
    until `stop`."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    sock.setblocking(False)

    def hold() -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            while not stop.is_set():
                for key, _ in sel.select(0.05):
                    if key.fileobj is sock:
                        with contextlib.suppress(OSError):
                            conn = sock.accept()[0]
                            conn.setblocking(False)
                            sel.register(conn, selectors.EVENT_READ)
                        continue
                    try:
                        gone = not key.fileobj.recv(65536)  # what it was sent is read and ignored
                    except OSError:
                        gone = True
                    if gone:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
            for key in list(sel.get_map().values()):
                key.fileobj.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_flapping_endpoints_leave_tasks_and_fds_flat_and_no_probe_loop_lost():
    config = SimConfig(model="m", ttft_ms=5, itl_ms=1)
    ports = [free_port() for _ in range(4)]
    eps = [endpoint(f"http://127.0.0.1:{p}/v1", name=f"e{i}", model="m", interval_s=0.1, timeout_s=1.0,
                    first_token_timeout_s=0.5, connect_timeout_s=0.5, metrics_interval_s=0.2)
           for i, p in enumerate(ports)]
    sims = {0: start_sim_in_thread(config, port=ports[0]), 1: start_sim_in_thread(config, port=ports[1])}
    squatting = threading.Event()
    squatter = _squat(ports[2], squatting)  # port 2 is held by a process that never answers, all along
    engine = build_engine(eps, scrape_metrics=True)
    reports = []
    faults = ({"fail_rate": 1.0}, {"rate_limit": True}, {"stall_after_tokens": 1, "stall_s": 2.0},
              {"cut_after_tokens": 1}, {"bad_json": True}, {}, {"error_event_after_tokens": 1})
    # (step, port, start or stop): port 3 has nobody until 1.2 s; ports 0 and 3 are stopped and started
    # again (a server restart: counters from zero), before the warm-up ends and after it
    flaps = {1: (0, "stop"), 2: (0, "start"), 3: (3, "start"), 5: (0, "stop"), 6: (0, "start"),
             7: (3, "stop"), 8: (3, "start")}
    try:
        began = time.monotonic()
        engine.start()
        step = 0
        while (now := time.monotonic() - began) < RUN_S:
            sims[1].server.set_faults(**{"fail_rate": 0.0, "rate_limit": False, "stall_after_tokens": None,
                                         "cut_after_tokens": None, "bad_json": False,
                                         "error_event_after_tokens": None, **faults[step % len(faults)]})
            if step in flaps:
                index, action = flaps[step]
                if action == "stop":
                    sims.pop(index).stop()
                else:
                    sims[index] = start_sim_in_thread(config, port=ports[index])
            step += 1
            time.sleep(max(0.0, step * REPORT_S - now))
            reports.append(soak.engine_report(engine, began))
    finally:
        engine.stop()
        squatting.set()
        squatter.join(2)
        for sim in sims.values():
            sim.stop()
    # the same checks as the hour, scaled to seconds: a probe at least every 2.4 s (the longest gap, ten
    # means of 0.1 s, and a 1-s timeout, with room for a loaded machine); RSS within 20 MB (the test
    # process is shared).
    failures = soak.check(reports, warmup_s=1.6, rss_limit_mb=20.0, liveness_s=2.4)
    assert not failures, (failures, reports)
    assert reports[-1]["loops_alive"] == 4 and all(n > 3 for n in reports[-1]["sent"].values())
