"""Every human format of lpxtop/humanize.py in one table, expected text written by hand: the dashboard's cells
(`--` for unknown, never 0) and the prose of messages and reports."""

from __future__ import annotations

import pytest

from lpxtop import humanize as h

GIB, MIB = 2**30, 2**20

TABLE = [
    # cells: latencies in ms, at most six characters
    (h.fmt_ms, None, "--"), (h.fmt_ms, float("nan"), "--"), (h.fmt_ms, 3.24, "3.2"), (h.fmt_ms, 142.4, "142"), (h.fmt_ms, 999.4, "999"),
    (h.fmt_ms, 1250.0, "1.25s"), (h.fmt_ms, 12_345.0, "12.3s"), (h.fmt_ms, 125_000.0, "2m05s"),
    (h.fmt_ms_unit, 720.0, "720 ms"), (h.fmt_ms_unit, 1520.0, "1.52s"), (h.fmt_ms_unit, None, "--"),
    (h.fmt_signed_ms, 24.0, "+24"), (h.fmt_signed_ms, -3.1, "-3.1"), (h.fmt_signed_ms, 1200.0, "+1.20s"),
    # cells: rates, energy, counts
    (h.fmt_rate, 8.42, "8.4"), (h.fmt_rate, 842.0, "842"), (h.fmt_rate, 1234.0, "1.2k"), (h.fmt_rate, 123_456.0, "123k"),
    (h.fmt_joules, 0.412, "0.41"), (h.fmt_joules, 2.34, "2.3"), (h.fmt_joules, 15.2, "15"), (h.fmt_joules, -1.0, "--"),
    (h.fmt_count, 3.0, "3"), (h.fmt_count, 2.5, "2.5"), (h.fmt_count, None, "--"),
    # cells: bytes, binary units, one decimal from GiB
    (h.fmt_bytes, 512, "512B"), (h.fmt_bytes, 812 * MIB, "812M"), (h.fmt_bytes, int(78.1 * GIB), "78.1G"), (h.fmt_bytes, 71.2 * GIB, "71.2G"),
    (h.fmt_bytes, 2.5 * 1024 * GIB, "2.5T"), (h.fmt_bytes, float("inf"), "--"), (h.fmt_bytes, None, "--"),
    # cells: elapsed time
    (h.fmt_duration, 45, "45s"), (h.fmt_duration, 723, "12m03s"), (h.fmt_duration, 3723, "1h02m"),
    (h.fmt_duration, 273_600, "3d04h"), (h.fmt_duration, -5, "0s"), (h.fmt_duration, None, "--"),
    # prose: latencies, ages, memory, file sizes
    (h.spoken_ms, 4.3, "4.3 ms"), (h.spoken_ms, 430.0, "430 ms"), (h.spoken_ms, 6100.0, "6.10 s"),
    (h.spoken_ms, 61_000.0, "61.0 s"), (h.spoken_ms, 250_000.0, "250 s"),
    (h.message_age, 42, "42 s"), (h.message_age, 600, "10 min"), (h.message_age, 10_800, "3 h"),
    (h.message_age, 200_000, "2 d"), (h.message_age, -3, "0 s"), (h.message_age, None, "?"),
    (h.memory_size, 300 * MIB, "300 MiB"), (h.memory_size, int(1.5 * GIB), "1.5 GiB"),
    (h.file_size, 812, "812 B"), (h.file_size, 4_200_000, "4.2 MB"), (h.file_size, 1.5e9, "1.5 GB"),
    (h.file_size, 3e12, "3.0 TB"), (h.file_size, 5e15, "5000.0 TB"),
]


@pytest.mark.parametrize("fmt, value, text", TABLE, ids=[f"{f.__name__}({v!r})" for f, v, _ in TABLE])
def test_human_formats(fmt, value, text):
    assert fmt(value) == text


def test_formats_with_a_second_argument():
    assert (h.fmt_pct(0.5, fraction=True), h.fmt_pct(12.34, digits=1), h.fmt_pct(None)) == ("50%", "12.3%", "--")
    assert h.fmt_pct(1e308, fraction=True) == "--"  # 1e310 % is not a number to show
    assert (h.fmt_ago(1000.0, 1723.0), h.fmt_ago(90.0, now=100.0), h.fmt_ago(None, 5.0)) == ("12m03s ago", "10s ago", "--")


def test_every_cell_format_takes_any_number_without_raising():
    cells = (h.fmt_ms, h.fmt_ms_unit, h.fmt_signed_ms, h.fmt_rate, h.fmt_joules, h.fmt_count, h.fmt_bytes,
             h.fmt_duration, h.fmt_pct)
    for value in (float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 10**400, 0, -0.0, True):
        for fmt in cells:
            assert isinstance(fmt(value), str), (fmt.__name__, value)
