"""What the dashboard loads before its first frame, asked of a fresh interpreter: only what that frame needs.

The readers of GPUs, processes and /metrics, the charts, OpenTelemetry, the agent, latency-chain and load-test
records and the screens behind a key load later (docs/first-contact.md, "Figures within a second"); a module
that starts importing one of them at the top would put its cost back before the frame.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.imports import pulled_in

# The modules `lpxtop URL` imports up to its first frame (cli/entry.py, cli/dashboard.py's open_ui).
BEFORE_THE_FRAME = [
    "lpxtop.cli.entry",
    "lpxtop.cli.dashboard",
    "lpxtop.cli.assemble",
    "lpxtop.record.settings",
    "lpxtop.engine.traces.attach",
    "lpxtop.ui.app",
    "lpxtop.ui.quiet_driver",
]

LATER = (
    "psutil", "pynvml", "plotext", "opentelemetry", "google.protobuf",
    "lpxtop.engine.scrape", "lpxtop.engine.gpu.collector", "lpxtop.engine.gpu.nvml",
    "lpxtop.model.agent", "lpxtop.model.chain", "lpxtop.model.load",
    "lpxtop.ui.screens.detail", "lpxtop.ui.screens.load",
)


def test_the_dashboard_loads_before_its_first_frame_only_what_the_frame_needs():
    assert pulled_in(BEFORE_THE_FRAME, LATER) == {}


def test_a_recording_reads_the_snapshot_records_that_load_on_first_use():
    # A fresh interpreter, where the snapshot module has not yet been asked for its deferred names: the codec
    # still finds every record type a snapshot may carry (agent, chain, load).
    code = ("import json; from lpxtop.model.snapshot import Snapshot; from lpxtop.record.codec import record_types; "
            "print(json.dumps(sorted(record_types([Snapshot]))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-800:]
    names = set(json.loads(result.stdout))
    assert {"AgentView", "ChainSummary", "LoadState", "StepResult", "EndpointView"} <= names
