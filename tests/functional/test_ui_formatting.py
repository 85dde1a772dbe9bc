"""Number formatting and threshold levels, with expected text written by hand."""

from __future__ import annotations

import pytest

from lpxtop.ui.formatting import (
    bar_text,
    fmt_ago,
    fmt_bytes,
    fmt_duration,
    fmt_ms,
    fmt_pct,
    fmt_rate,
    fmt_signed_ms,
    level,
    merge_thresholds,
    spark_text,
    truncate,
)


@pytest.mark.parametrize(
    "value,text",
    [(None, "--"), (3.24, "3.2"), (142.4, "142"), (999.4, "999"), (1250.0, "1.25s"), (12_345.0, "12.3s"),
     (125_000.0, "2m05s")],
)
def test_fmt_ms(value, text):
    assert fmt_ms(value) == text


def test_other_formats():
    assert fmt_signed_ms(32.0) == "+32" and fmt_signed_ms(-3.14) == "-3.1" and fmt_signed_ms(None) == "--"
    assert fmt_rate(84.21) == "84.2" and fmt_rate(842.0) == "842" and fmt_rate(1234.0) == "1.2k"
    assert fmt_pct(0.91, fraction=True) == "91%" and fmt_pct(23.46, digits=1) == "23.5%" and fmt_pct(None) == "--"
    assert fmt_bytes(int(78.1 * 1024**3)) == "78.1G" and fmt_bytes(512 * 1024**2) == "512M" and fmt_bytes(None) == "--"
    assert fmt_duration(45) == "45s" and fmt_duration(723) == "12m03s" and fmt_duration(3723) == "1h02m"
    assert fmt_duration(273600) == "3d04h"
    assert fmt_ago(90.0, now=100.0) == "10s ago" and fmt_ago(None, now=1.0) == "--"
    assert truncate("abcdef", 4) == "abc…" and truncate("a\nb", 9) == "a b" and truncate(None, 3) == "--"


def test_levels_against_thresholds():
    t = merge_thresholds({"ttft_p99_ms": (100, 200)})
    assert level(None, "ttft_p99_ms", t) == "unknown"
    assert level(99.9, "ttft_p99_ms", t) == "ok"
    assert level(100.0, "ttft_p99_ms", t) == "warning"
    assert level(250.0, "ttft_p99_ms", t) == "critical"
    assert level(0.91, "kv_cache", t) == "warning"  # default 0.9 / 0.97
    assert level(6.0, "error_pct", t) == "critical"  # default 1 / 5
    assert level(5.0, "no_such_key", t) == "ok"


def test_spark_and_bar():
    assert spark_text([1.0, None, 8.0], 3) == "▁ █"
    assert spark_text([5.0, 5.0], 4) == "▁▁"
    assert spark_text([], 4) == ""
    assert bar_text(0.5, 4) == "██  "
    assert bar_text(1.0, 3) == "███"
    assert bar_text(None, 3) == "···"
    assert bar_text(0.0625, 2) == "▏ "  # 1/16 of two cells is one eighth of a cell
