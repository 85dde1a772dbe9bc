"""The recorder's own bookkeeping: marks for alerts, restarts and bookmarks, a bounded queue, marks from any thread."""

from __future__ import annotations

import threading

from lpxtop.model.alerts import Alert
from lpxtop.model.events import AlertsEvent, SampleEvent, ScrapeEvent, SystemEvent
from lpxtop.model.ports import PortStatus
from lpxtop.model.probe import Sample
from lpxtop.model.server import ServerMetrics
from lpxtop.record import recorder as recorder_module
from lpxtop.record.reading import Recording
from lpxtop.record.recorder import Recorder


def marks_of(path) -> list[tuple[str, dict]]:
    with Recording(path) as rec:
        return [(m.kind, m.payload) for m in rec.marks()]


def test_alerts_restarts_and_bookmarks_become_marks(tmp_path):
    path = tmp_path / "r.lpxrec"
    recorder = Recorder(path)
    warn = Alert("warning", "kv_saturated", "KV cache 95 %", "e")
    crit = Alert("critical", "gpu_memory", "GPU 0 memory at 99 %", "gpu0")
    events = [
        AlertsEvent(1.0, (warn,)),
        AlertsEvent(2.0, (warn, crit)),
        AlertsEvent(3.0, (Alert("warning", "kv_saturated", "KV cache 97 %", "e"), crit)),  # the same two, reworded
        ScrapeEvent("e", 4.0, ServerMetrics(kind="vllm", restart_count=0)),
        ScrapeEvent("e", 5.0, ServerMetrics(kind="vllm", restart_count=1)),
        SystemEvent(6.0, None, (PortStatus(8000, "ok", "fine", pid=1),), ()),
        SystemEvent(7.0, None, (PortStatus(8000, "restarted", "new PID 2", pid=2, previous_pid=1),), ()),
    ]
    for event in events:
        recorder.on_event(event)
    threads = [threading.Thread(target=recorder.mark, args=("load_step", {"step": i}, 10.0 + i)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    recorder.bookmark("\x1b[2Jcleared?", wall_time=20.0)
    recorder.close()
    marks = marks_of(path)
    kinds = [k for k, _ in marks]
    assert kinds.count("alert") == 2  # a reworded alert is not a new one
    assert ("bookmark", {"note": "GPU 0 memory at 99 %", "auto": True}) in marks  # critical: bookmarked itself
    assert kinds.count("restart") == 2
    assert sorted(p["step"] for k, p in marks if k == "load_step") == [0, 1, 2]
    assert ("bookmark", {"note": "cleared?"}) in marks  # terminal control stripped from the note


def test_a_full_queue_drops_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder_module, "MAX_PENDING", 5)
    recorder = Recorder(tmp_path / "r.lpxrec")
    sample = SampleEvent("e", Sample(endpoint="e", wall_time=1.0, start_ns=0, ok=True))
    for _ in range(8):
        recorder.on_event(sample)
    assert recorder.dropped == 3
    (alert,) = recorder.alerts()
    assert alert.severity == "info" and "dropped 3 events" in alert.message
    recorder.close()
    with Recording(tmp_path / "r.lpxrec") as rec:
        assert sum(1 for _ in rec.events()) == 5
