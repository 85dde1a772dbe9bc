"""Who holds an endpoint's port, and in what state (owned by engine/ports.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PortStatus:
    port: int
    status: str  # ok | down | conflict | restarted | multiple | model_mismatch | unknown_owner | leftover
    detail: str  # what is wrong and what to do next
    pid: int | None = None
    process: str | None = None
    cmdline: str | None = None
    endpoint: str | None = None

    def to_json(self) -> dict:
        return {
            "port": self.port,
            "pid": self.pid,
            "process": self.process,
            "cmdline": self.cmdline,
            "status": self.status,
            "detail": self.detail,
            "endpoint": self.endpoint,
        }


@dataclass(frozen=True)
class LeftoverProcess:
    """A known inference-server process that looks abandoned (holds GPU memory, no port, or a zombie)."""

    pid: int
    name: str
    user: str | None
    cmdline: str
    reason: str  # what makes it a leftover and what to do next
    gpu_used_bytes: int | None = None

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "name": self.name,
            "user": self.user,
            "cmdline": self.cmdline,
            "reason": self.reason,
            "gpu_used_bytes": self.gpu_used_bytes,
        }
