"""JSON that every reader parses, whatever numbers lpxtop was given.

Servers put numbers into lpxtop from outside: `+Inf` and `NaN` are legal values of a Prometheus
gauge, a `usage.completion_tokens` can be a 400-digit integer, NVML can return nonsense. Python's
`json` writes a non-finite float as `Infinity`/`NaN`, which is not JSON (jq, Go's encoding/json and
browsers refuse the whole document), and Go refuses an integer no float64 holds.

One mechanism for every JSON lpxtop writes: `dumps()` turns each non-finite float, and each integer
outside the signed 64-bit range, into `null` (the schema's "not known"), then serializes with
`allow_nan=False`, so anything that slipped past would be an error here, never invalid output.
"""

from __future__ import annotations

import json
import math
from typing import Any

INT64_MAX = 2**63 - 1


def json_safe(value: Any) -> Any:
    """`value` with non-finite floats and out-of-range integers replaced by None (containers copied)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value if -INT64_MAX - 1 <= value <= INT64_MAX else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `json_safe(value)`: always valid JSON (RFC 8259)."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)
