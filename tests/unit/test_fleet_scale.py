"""The fleet table's build is linear in the series Prometheus answers with: each answer is read once a
refresh, however many rows look values up in it (benchmarks/fleet_build.py prints the times)."""

from __future__ import annotations

import time

from lpxtop.fleet import client
from lpxtop.fleet.source import FleetSettings, build_snapshot
from tests.support.fleet_readings import synthetic_reading

SETTINGS = FleetSettings(prometheus_url="http://127.0.0.1:9090")


def _reads_of_values(monkeypatch, rows: int) -> tuple[int, int, float]:
    reading = synthetic_reading(rows)
    series = sum(len(a.series) for a in reading.answers.values())
    reads = 0
    plain = client.Series.value

    def counted(self):
        nonlocal reads
        reads += 1
        return plain.fget(self)

    monkeypatch.setattr(client.Series, "value", property(counted))
    began = time.perf_counter()
    snapshot = build_snapshot(SETTINGS, reading, started_at=0.0, seq=1, last_good=None)
    elapsed = time.perf_counter() - began
    monkeypatch.setattr(client.Series, "value", plain)
    assert len(snapshot.endpoints) == rows + rows // 4
    return reads, series, elapsed


def test_building_the_table_reads_each_series_a_bounded_number_of_times(monkeypatch):
    """Per-row lookups in every answer made this quadratic (1,000 rows: 18 s; 2,000, the default
    --max-series: 51 s). Now each series' value is read at most twice, whatever the fleet's size."""
    for rows in (100, 400):
        reads, series, _ = _reads_of_values(monkeypatch, rows)
        assert reads <= 2 * series, (rows, reads, series)


def test_the_default_max_series_of_rows_builds_well_within_a_refresh(monkeypatch):
    reads, series, elapsed = _reads_of_values(monkeypatch, 2000)
    assert reads <= 2 * series
    assert elapsed < 20.0, f"{elapsed:.1f} s for 2,000 rows (it was 51 s when quadratic)"
