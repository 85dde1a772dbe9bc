"""Who holds an endpoint's port, and in what state (owned by engine/system/ports.py)."""

from __future__ import annotations

from dataclasses import dataclass

PORT_STATES = ("ok", "down", "conflict", "restarted", "multiple", "model_mismatch", "unknown_owner")


@dataclass(frozen=True)
class PortStatus:
    """The listener on one local endpoint's port.

    `detail` says what is wrong and what to do next. Process facts (`pid` … `cpu_pct`) describe the
    main listener and are None when it is hidden from us or nothing listens. `pids` lists every
    listening process (several for `multiple`); `previous_pid` is the listener seen before a restart.
    """

    port: int
    status: str  # one of PORT_STATES
    detail: str  # what is wrong and what to do next
    pid: int | None = None
    process: str | None = None
    cmdline: str | None = None
    endpoint: str | None = None
    host: str | None = None
    user: str | None = None
    started_at: float | None = None  # epoch seconds
    rss_bytes: int | None = None
    cpu_pct: float | None = None  # None until a second sample exists
    server_kind: str | None = None  # from the process table (vllm, sglang, …); None if not recognised
    pids: tuple[int, ...] = ()
    previous_pid: int | None = None
    served_models: tuple[str, ...] = ()
    expected_model: str | None = None

    def to_json(self) -> dict:
        return {
            "port": self.port,
            "pid": self.pid,
            "process": self.process,
            "cmdline": self.cmdline,
            "status": self.status,
            "detail": self.detail,
            "endpoint": self.endpoint,
            "host": self.host,
            "user": self.user,
            "started_at": self.started_at,
            "rss_bytes": self.rss_bytes,
            "cpu_pct": self.cpu_pct,
            "server_kind": self.server_kind,
            "pids": list(self.pids),
            "previous_pid": self.previous_pid,
            "served_models": list(self.served_models),
            "expected_model": self.expected_model,
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
    server_kind: str | None = None
    ppid: int | None = None
    started_at: float | None = None  # epoch seconds
    rss_bytes: int | None = None
    zombie: bool = False

    def to_json(self) -> dict:
        return {
            "pid": self.pid,
            "name": self.name,
            "user": self.user,
            "cmdline": self.cmdline,
            "reason": self.reason,
            "gpu_used_bytes": self.gpu_used_bytes,
            "server_kind": self.server_kind,
            "ppid": self.ppid,
            "started_at": self.started_at,
            "rss_bytes": self.rss_bytes,
            "zombie": self.zombie,
        }
