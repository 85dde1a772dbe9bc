"""Host CPU and memory (owned by engine/host.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostSnapshot:
    cpu_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None

    def to_json(self) -> dict:
        return {"cpu_pct": self.cpu_pct, "mem_used_bytes": self.mem_used_bytes, "mem_total_bytes": self.mem_total_bytes}
