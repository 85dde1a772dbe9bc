"""Hostile numbers in every numeric field of a record: what a server, NVML or a bug could hand lpxtop."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

HOSTILE_FLOATS = (float("inf"), float("-inf"), float("nan"), 1e308)
HUGE_INT = 10**400


def mixed() -> Iterator[float | int]:
    """Every hostile float in turn, for `poisoned(..., mixed())`: each float field gets the next one."""
    return itertools.cycle(HOSTILE_FLOATS)


def text_fed() -> tuple[type, ...]:
    """The records whose numbers lpxtop parses from a server's text (JSON, /metrics), where an integer
    can have any number of digits. NVML and the OS hand over fixed-size C integers."""
    from lpxtop.model.probe import Percentiles, Sample
    from lpxtop.model.server import ModelServerMetrics, ServerLatency, ServerMetrics
    from lpxtop.model.snapshot import EndpointView, GaugeSummary, ServerPoint, ServerSummary

    return (Sample, Percentiles, ServerMetrics, ModelServerMetrics, ServerLatency, EndpointView, ServerPoint,
            ServerSummary, GaugeSummary)


def poisoned(value: Any, hostile: float | Iterator[float | int], *, ints: bool | tuple[type, ...] = False,
             _inside: bool = False) -> Any:
    """`value` with every float replaced by `hostile` (or, for an iterator, its next value), and with
    `ints` every int that is not an identity or a clock lpxtop keeps itself by a 400-digit integer
    (`ints` a tuple of types: only inside records of those types), recursively through frozen
    dataclasses, tuples, lists and dicts."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return next(hostile) if isinstance(hostile, Iterator) else hostile
    if isinstance(value, int):
        return HUGE_INT if (ints is True or _inside) else value
    if isinstance(value, tuple):
        return tuple(poisoned(v, hostile, ints=ints, _inside=_inside) for v in value)
    if isinstance(value, list):
        return [poisoned(v, hostile, ints=ints, _inside=_inside) for v in value]
    if isinstance(value, dict):
        return {k: poisoned(v, hostile, ints=ints, _inside=_inside) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inside = isinstance(ints, tuple) and isinstance(value, ints)
        changes = {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            if f.name in ("config", "seq", "index", "pid", "port", "wall_time", "started_at", "start_ns"):
                continue  # identity and clocks lpxtop keeps itself
            changes[f.name] = poisoned(getattr(value, f.name), hostile, ints=ints, _inside=inside)
        return dataclasses.replace(value, **changes)
    return value
