"""A load run's recording: `lpxtop load` records every run unless --no-record (docs/recording.md).

What the file holds: the readings of the engine beside the test (the server's /metrics every second,
the GPU, the host; in the dashboard also the ports and alerts), one `load_step` mark per step placed at
the step's first request with everything the JSON report says of it (vllm bench serve's names, the SLO
verdict, what the server showed during the step), and two `load` marks, the plan when the run began and
the outcome and capacity when it ended. The load's own requests are not engine probes and are not in
it: one line per request is what `--requests-jsonl` writes. `lpxtop replay FILE` shows the server, GPU
and host as they were and jumps from step to step (`n`); `lpxtop export FILE --what load` lists the steps.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lpxtop.model.load import format_level

LABEL = "load"  # recordings are named load-<local time>.lpxrec


class LoadMarks:
    """Turns the controller's marks into the recording's (`LoadController.add_mark_listener`).

    Called on the load generator's loop: `Recorder.mark` only appends to a deque, so this returns at once.
    """

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        self._steps: dict[int, tuple[str, float]] = {}  # step index -> (mode, level), from its start

    def on_mark(self, kind: str, payload: Mapping[str, Any], wall_time: float) -> None:
        if kind == "load_start":
            self.recorder.mark("load", {"event": "start", "label": "the load test began",
                                        "plan": payload.get("plan")}, wall_time)
        elif kind == "load_step_start":
            self._steps[int(payload.get("step", -1))] = (str(payload.get("mode")), float(payload.get("level", 0)))
        elif kind == "load_step_end":
            result = dict(payload.get("result") or {})
            index = int(payload.get("step", result.get("index", -1)))
            mode, level = self._steps.pop(index, (None, None))
            started = result.get("started_at")
            at = float(started) if isinstance(started, (int, float)) else wall_time
            self.recorder.mark("load_step", {"label": step_label(index, mode, level, result), "mode": mode,
                                             "level": level, **result}, at)
        elif kind == "load_end":
            capacity = dict(payload.get("capacity") or {})
            self.recorder.mark("load", {"event": "end", "label": capacity.get("summary") or payload.get("outcome"),
                                        "outcome": payload.get("outcome"), "reason": payload.get("reason"),
                                        "capacity": capacity}, wall_time)


def step_label(index: int, mode: str | None, level: float | None, result: Mapping[str, Any]) -> str:
    """One line for the time bar: "step 2: 4 concurrent, done, 38 ok, TTFT p50 12.3 ms, SLO met"."""
    parts = [f"step {index + 1}: {format_level(mode, level) if mode else '?'}", str(result.get("status", "?")),
             f"{result.get('completed', 0)} ok"]
    if result.get("failed"):
        parts.append(f"{result['failed']} failed")
    ttft = result.get("median_ttft_ms")
    if isinstance(ttft, (int, float)):
        parts.append(f"TTFT p50 {ttft:.1f} ms")
    if result.get("slo_met") is not None:
        parts.append("SLO met" if result["slo_met"] else "SLO missed")
    return ", ".join(parts)


def start_recording(engine: Any, controller: Any, args: argparse.Namespace) -> Any | None:
    """The recorder of a load run (None with --no-record), attached to `engine` before it starts and to the
    controller's marks. A file that cannot be written does not stop the test: the recorder comes back
    stopped, and the end of the run says why."""
    if args.no_record:
        return None
    from lpxtop.record.recorder import Recorder
    from lpxtop.record.retention import new_recording_path
    from lpxtop.record.settings import resolve

    settings = resolve(args, None, enabled=True, path=args.record_file)
    directory = settings.cleans_directory
    path = settings.path if settings.path is not None else new_recording_path(directory, label=LABEL)
    plan = controller.plan
    recorder = Recorder.start_for(engine, path, endpoints=[plan.endpoint], retention=settings.retention,
                                  clean_dir=directory, meta={"load": plan.summary()})
    controller.add_mark_listener(LoadMarks(recorder).on_mark)
    return recorder


def finish_recording(recorder: Any | None) -> Path | None:
    """Close the recording (what is queued is committed); its path, or None when it failed."""
    if recorder is None:
        return None
    recorder.close()
    return None if recorder.failure is not None else Path(recorder.path)
