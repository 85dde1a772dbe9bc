"""Threshold levels, bars, sparklines and cuts, with expected text written by hand (the numbers' own text:
tests/unit/test_humanize.py)."""

from __future__ import annotations

from lpxtop.ui.formatting import bar_text, level, merge_thresholds, spark_text, truncate


def test_truncate():
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
