"""The dashboard on a fixed fleet snapshot (built from Prometheus-shaped answers): the host and GPU
columns, worst first, the detail screen's charts from query_range, and the refused controls.
SVG snapshots at 160×48; update with --snapshot-update and look at them before committing."""

from __future__ import annotations

from lpxtop.engine.source import FixedSource
from lpxtop.fleet.build import Reading
from lpxtop.fleet.client import Answer, Series
from lpxtop.fleet.source import FleetSettings, build_snapshot, fleet_capabilities
from lpxtop.ui.app import create_app
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from lpxtop.ui.widgets.header_bar import HeaderBar
from tests.support.fleet_readings import lpxtop_reading, s


class FixedFleet(FixedSource):
    """A fixed snapshot that declares what the fleet view does (no controls, and why)."""

    def __init__(self, snapshot) -> None:
        super().__init__(snapshot, capabilities=fleet_capabilities("5m", 5.0))


def fleet_snapshot():
    reading: Reading = lpxtop_reading()
    a = {"host": "hostA", "endpoint": "e1"}
    for key, series in {
        "gpu_used": [s(40 * 2**30, host="hostA", gpu="gpu0", uuid="GPU-a", name="NVIDIA H100 80GB HBM3")],
        "gpu_total": [s(80 * 2**30, host="hostA", gpu="gpu0", uuid="GPU-a", name="NVIDIA H100 80GB HBM3")],
        "gpu_util": [s(0.61, host="hostA", gpu="gpu0", uuid="GPU-a", name="NVIDIA H100 80GB HBM3")],
        "gpu_processes": [s(39 * 2**30, host="hostA", gpu="gpu0", pid="4121", process="vllm", endpoint="e1")],
        "ports": [s(1, host="hostA", endpoint="e1", port="8000", state="ok"),
                  s(1, host="hostB", endpoint="e1", port="30000", state="conflict")],
        "alerts": [s(1, host="hostB", kind="gpu_memory", severity="warning")],
    }.items():
        reading.answers[key] = Answer(series)
    times = [1000.0 - 300 + 5 * i for i in range(61)]
    reading.charts = {
        "ttft_p50_ms": Answer([Series(a, [(t, 0.030 + 0.01 * ((i // 10) % 3)) for i, t in enumerate(times)])]),
        "ttft_p99_ms": Answer([Series(a, [(t, 0.048 + 0.02 * ((i // 10) % 3)) for i, t in enumerate(times)])]),
        "requests_waiting": Answer([Series(a, [(t, float(i % 7)) for i, t in enumerate(times)])]),
        "kv_cache_usage": Answer([Series(a, [(t, 0.3 + 0.005 * i) for i, t in enumerate(times)])]),
    }
    return build_snapshot(FleetSettings(prometheus_url="http://prom:9090"), reading, started_at=900.0, seq=1,
                          last_good=None)


def make_fleet_app():
    source = FixedFleet(fleet_snapshot())
    return source, create_app(source, poll=False, readonly=True, ssh=False)


def test_fleet_main_screen(snap_compare):
    _, app = make_fleet_app()
    assert snap_compare(app, terminal_size=(160, 48))


def test_fleet_detail_screen(snap_compare):
    _, app = make_fleet_app()
    # worst first: hostB (its exporter is down) leads, then hostA
    assert snap_compare(app, press=["down", "enter"], terminal_size=(160, 48))


async def test_fleet_rows_are_keyed_by_host_and_the_controls_say_why_they_do_nothing():
    source, app = make_fleet_app()
    async with app.run_test(size=(160, 48)) as pilot:
        header = app.screen.query_one(HeaderBar)._last
        assert header is not None and "refresh 5.0s" in header.plain and "probe" not in header.plain
        table = app.screen.query_one(EndpointsTable)
        assert table.row_names == ["hostB/e1", "hostA/e1", "10.0.0.3/10.0.0.3:30000"]
        assert [c.key for c in table.columns][:3] == ["status", "host", "name"]
        assert "gpu_mem" in [c.key for c in table.columns]
        for key in ("p", "r", "plus", "T"):
            await pilot.press(key)
        await pilot.pause(0.1)
        messages = [str(n.message) for n in app._notifications]
        assert sum("fleet view" in m for m in messages) == 4
        assert source.calls == []  # nothing reached the source
