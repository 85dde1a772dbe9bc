"""Who holds an endpoint's port, and in what state (owned by engine/system/ports.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

PORT_STATES = ("ok", "down", "conflict", "restarted", "multiple", "model_mismatch", "unknown_owner")


@dataclass(frozen=True)
class PortStatus:
    """The listener on one local endpoint's port.

    `detail` says what is wrong and what to do next. Process facts (`pid` … `cpu_pct`) describe the
    main listener and are None when it is hidden from us or nothing listens. `pids` lists every
    listening process (several for `multiple`); `previous_pid` is the listener seen before a restart.
    `endpoints`: every endpoint the listener serves, this one among them, in port order (one process may
    serve several: several ports, or several models behind one port).
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
    endpoints: tuple[str, ...] = ()

    def served(self) -> tuple[str, ...]:
        """Every endpoint the listener serves: `endpoints`, else this one alone (nothing listens, or a
        recording made before `endpoints` existed)."""
        return self.endpoints or ((self.endpoint,) if self.endpoint else ())

    def to_json(self) -> dict:
        return {
            "port": self.port,
            "pid": self.pid,
            "process": self.process,
            "cmdline": self.cmdline,
            "status": self.status,
            "detail": self.detail,
            "endpoint": self.endpoint,
            "endpoints": list(self.served()),
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


def endpoints_by_pid(ports: Iterable[PortStatus]) -> dict[int, tuple[str, ...]]:
    """Each listening process -> every endpoint it serves, in port order."""
    by_pid: dict[int, list[str]] = {}
    for p in ports:
        if p.pid is not None and p.endpoint and p.endpoint not in by_pid.setdefault(p.pid, []):
            by_pid[p.pid].append(p.endpoint)
    return {pid: tuple(names) for pid, names in by_pid.items()}


def endpoints_by_process(ports: Iterable[PortStatus]) -> dict[str, tuple[str, ...]]:
    """Each endpoint's name -> every endpoint served by the same process (itself included), in port order."""
    return {name: names for names in endpoints_by_pid(ports).values() for name in names}


def with_endpoints(ports: Iterable[PortStatus]) -> tuple[PortStatus, ...]:
    """`ports` with each one's `endpoints` filled in: every endpoint its listener serves."""
    ports = tuple(ports)
    served = endpoints_by_process(ports)
    return tuple(replace(p, endpoints=served[p.endpoint]) if p.pid is not None and p.endpoint in served else p
                 for p in ports)


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
