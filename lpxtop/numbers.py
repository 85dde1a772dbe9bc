"""Numbers from outside (a server's /metrics, a recording, a reply's JSON) made safe to compute with and to show.

`finite_or_none` cleans a value into a finite float or None; `is_finite` tests whether a value already is a
finite number. A /metrics gauge may legally be NaN or ±Inf, a JSON number may have 400 digits: neither may
reach arithmetic, a chart or a JSON document.
"""

from __future__ import annotations

import math


def finite_or_none(value: object) -> float | None:
    """`value` as a finite float, or None (None, NaN, ±Inf, a number too large for a float, not a number)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def is_finite(value: object) -> bool:
    """Whether `value` is an int or float that is finite: False for None, NaN, ±Inf, an int too large for a
    float, a bool and anything that is not a number (never raises)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
