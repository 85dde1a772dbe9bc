"""Port and process health of local endpoints, and leftover inference-server processes.

`PortMonitor.collect()` is blocking (it reads /proc): the engine calls it in a worker thread every
~2 s. One listening-socket scan and one process scan per call, whatever the number of endpoints.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from lpxtop.engine.diagnosis import model_matches, model_not_served, nothing_listens
from lpxtop.engine.system.listeners import (
    ListenScan,
    is_local_host,
    local_names_and_addresses,
    scan_listeners,
    tcp_connects,
)
from lpxtop.engine.system.patterns import ServerPattern
from lpxtop.engine.system.processes import ProcessScanner, ProcInfo, ancestors, children_map, descendants
from lpxtop.engine.system.shown import short_command
from lpxtop.humanize import memory_size, message_age
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.ports import LeftoverProcess, PortStatus, with_endpoints


def is_root() -> bool:
    """Whether we may see (and signal) every user's processes. Looked up on each call so tests can
    monkeypatch `os.geteuid`."""
    geteuid = getattr(os, "geteuid", None)
    return geteuid is not None and geteuid() == 0


@dataclass(frozen=True)
class _Restart:
    old_pid: int
    new_pid: int
    seen_at: float


class PortMonitor:
    """Tracks who listens on each local endpoint's port, across calls (to notice restarts)."""

    def __init__(
        self,
        *,
        restart_hold_s: float = 30.0,
        startup_grace_s: float = 300.0,
        connect_timeout_s: float = 0.3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`restart_hold_s`: how long `restarted` stays shown after a new PID took the port.
        `startup_grace_s`: a known server with no port is only called a leftover after this long
        (vLLM may load weights for minutes before it listens)."""
        self.restart_hold_s = restart_hold_s
        self.startup_grace_s = startup_grace_s
        self.connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._local: frozenset[str] | None = None
        self._scanner = ProcessScanner()
        # Process objects survive between calls: cpu_percent() measures since the previous call.
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_primed: set[int] = set()
        self._last_pid: dict[tuple[str, int], int] = {}
        self._restarts: dict[tuple[str, int], _Restart] = {}
        # ppid -> child PIDs from the last collect()'s process scan (None when it failed): the host
        # collector reuses it rather than scanning /proc again for each server's children.
        self.last_kids: dict[int, list[int]] | None = None

    def collect(
        self,
        endpoints: Sequence[EndpointConfig],
        served_models: Mapping[str, tuple[str, ...]] | None = None,
        gpu_pids: Mapping[int, int] | None = None,
    ) -> tuple[tuple[PortStatus, ...], tuple[LeftoverProcess, ...]]:
        """Port status of every endpoint on this machine, and the leftover server processes. Never raises.

        `served_models`: endpoint name -> model ids its /v1/models returned (missing or empty: it did
        not answer). `gpu_pids`: pid -> GPU bytes in use (from NVML; empty without a GPU).
        """
        self.last_kids = None
        try:
            if self._local is None:
                self._local = local_names_and_addresses()
            local_eps = [ep for ep in endpoints if is_local_host(ep.host, self._local)]
            table = self._scanner.scan()
            scan = scan_listeners()
            kids = children_map(table)
            self.last_kids = kids if table else None
            used: set[int] = set()
            statuses = []
            for ep in local_eps:
                try:
                    statuses.append(self._status(ep, table, scan, served_models, used))
                except Exception as exc:  # one odd endpoint must not hide the others
                    statuses.append(
                        PortStatus(
                            ep.port,
                            "unknown_owner",
                            f"could not inspect port {ep.port}: {exc}",
                            endpoint=ep.name,
                            host=ep.host,
                        )
                    )
            leftovers = self._leftovers(
                table, kids, scan, gpu_pids or {}, {ep.port for ep in local_eps}, used
            )
            self._forget_except(used)
            live = {(ep.name, ep.port) for ep in local_eps}
            for memory in (self._last_pid, self._restarts):
                for key in [k for k in memory if k not in live]:
                    del memory[key]
            return with_endpoints(statuses), tuple(leftovers)
        except Exception as exc:
            return tuple(
                PortStatus(
                    ep.port, "unknown_owner", f"port check failed: {exc}", endpoint=ep.name, host=ep.host
                )
                for ep in endpoints
                if is_local_host(ep.host, self._local or ())
            ), ()

    def _status(
        self,
        ep: EndpointConfig,
        table: Mapping[int, ProcInfo],
        scan: ListenScan,
        served_models: Mapping[str, tuple[str, ...]] | None,
        used: set[int],
    ) -> PortStatus:
        port, now, key = ep.port, self._clock(), (ep.name, ep.port)
        listeners = scan.by_port.get(port, ())
        models = tuple(served_models.get(ep.name, ()) or ()) if served_models else ()
        base = {"endpoint": ep.name, "host": ep.host, "served_models": models, "expected_model": ep.model}
        visible = list(dict.fromkeys(ls.pid for ls in listeners if ls.pid is not None))
        hidden = any(ls.pid is None for ls in listeners)
        hidden_uid = next((ls.uid for ls in listeners if ls.pid is None and ls.uid is not None), None)

        if not visible and not hidden:
            # The socket table may miss a listener (refused table, another network namespace): a plain
            # connect() tells "something listens" from "down".
            if not tcp_connects(ep.host, port, self.connect_timeout_s):
                return PortStatus(
                    port,
                    "down",
                    nothing_listens(f"{ep.host}:{port}"),
                    **base,
                )
            if not scan.complete:
                return PortStatus(port, "unknown_owner", _hidden_owner(port), **base)
            return PortStatus(
                port,
                "unknown_owner",
                f"something answers on {ep.host}:{port} but lpxtop cannot see which process "
                "(another container or network namespace?)",
                **base,
            )
        if not visible:
            user = user_name(hidden_uid)
            return PortStatus(port, "unknown_owner", _hidden_owner(port, user), user=user, **base)

        groups = _group_listeners(visible, table)
        mains = [g[0] for g in groups]
        used.update(mains)
        main = mains[0]
        facts = self._facts(main, table)
        info = table.get(main)
        # The listener's own kind, else its parent's (API-server processes spawned by `vllm serve`).
        candidates = [*groups[0], *ancestors(main, table)[:1]]
        kind = next((s.kind for p in candidates if (s := _server_of(table.get(p))) is not None), None)
        base.update(facts, server_kind=kind, pids=tuple(visible))

        if len(groups) > 1 or hidden:
            count = len(groups) + (1 if hidden else 0)
            who = ", ".join(f"PID {p} ({_describe(table.get(p), now)})" for p in mains)
            if hidden:
                who += ", and one hidden from lpxtop (another user's?)"
            return PortStatus(
                port,
                "multiple",
                f"port {port} has {count} listening processes ({who}; SO_REUSEPORT): requests are "
                "split between them — stop the one you do not want",
                **base,
            )

        previous = self._last_pid.get(key)
        self._last_pid[key] = main
        if previous is not None and previous != main:
            self._restarts[key] = _Restart(previous, main, now)
        restart = self._restarts.get(key)
        if restart is not None and (restart.new_pid != main or now - restart.seen_at > self.restart_hold_s):
            del self._restarts[key]
            restart = None

        desc = _describe(info, now)
        if kind is None and not models and served_models is not None and ep.name not in served_models:
            # /v1/models has not been asked yet (the first probe is on its way): too early to call it a conflict
            return PortStatus(port, "ok", f"PID {main} ({desc}) listens on port {port}; checking /v1/models", **base)
        if kind is None and not models:
            nxt = _free_port_after(port, scan)
            answered = "" if served_models is None else " and /v1/models did not answer"
            return PortStatus(
                port,
                "conflict",
                f"port {port} is held by PID {main} ({desc}), not a known inference server{answered}: "
                f"stop it or start the new server with --port {nxt}",
                **base,
            )
        if ep.model and models and not model_matches(ep.model, models):
            return PortStatus(
                port,
                "model_mismatch",
                f"{model_not_served(ep.model, models)} — port {port}, PID {main} ({desc})",
                **base,
            )
        if restart is not None:
            return PortStatus(
                port,
                "restarted",
                f"port {port} is now held by PID {main} ({desc}), before by PID {restart.old_pid}: "
                "the server restarted — if you did not restart it, check its log for a crash",
                previous_pid=restart.old_pid,
                **base,
            )
        serving = f"serves {', '.join(models)}" if models else "listens"
        return PortStatus(port, "ok", f"PID {main} ({desc}) {serving} on port {port}", **base)

    def _process(self, pid: int, started_at: float | None) -> psutil.Process | None:
        """A cached Process for `pid`, replaced when the PID was reused by a new process."""
        proc = self._procs.get(pid)
        try:
            if proc is None or (started_at is not None and abs(proc.create_time() - started_at) > 0.01):
                proc = psutil.Process(pid)
                self._procs[pid] = proc
                self._cpu_primed.discard(pid)
        except (psutil.Error, OSError):
            self._procs.pop(pid, None)
            return None
        return proc

    def _facts(self, pid: int, table: Mapping[int, ProcInfo]) -> dict:
        """Process facts for PortStatus/LeftoverProcess fields; missing facts stay None."""
        info = table.get(pid)
        facts: dict = {
            "pid": pid,
            "process": info.name if info else None,
            "cmdline": (info.cmdline or None) if info else None,
            "user": info.user if info else None,
            "started_at": info.started_at if info else None,
            "rss_bytes": None,
            "cpu_pct": None,
        }
        proc = self._process(pid, info.started_at if info else None)
        if proc is None:
            return facts
        try:
            facts["rss_bytes"] = proc.memory_info().rss
        except (psutil.Error, OSError):
            pass
        try:
            cpu = proc.cpu_percent(interval=None)
            # The first call only starts the measurement (psutil returns 0.0): report nothing yet.
            facts["cpu_pct"] = cpu if pid in self._cpu_primed else None
            self._cpu_primed.add(pid)
        except (psutil.Error, OSError):
            pass
        return facts

    def _forget_except(self, used: set[int]) -> None:
        for pid in list(self._procs):
            if pid not in used:
                del self._procs[pid]
                self._cpu_primed.discard(pid)

    def _leftovers(
        self,
        table: Mapping[int, ProcInfo],
        kids: Mapping[int, list[int]],
        scan: ListenScan,
        gpu_pids: Mapping[int, int],
        endpoint_ports: set[int],
        used: set[int],
    ) -> list[LeftoverProcess]:
        """Known-server processes that look abandoned, most GPU memory first."""
        now = self._clock()
        ports_of: dict[int, set[int]] = {}
        for listeners in scan.by_port.values():
            for ls in listeners:
                if ls.pid is not None:
                    ports_of.setdefault(ls.pid, set()).add(ls.port)
        own = {os.getpid(), *ancestors(os.getpid(), table)}
        findings: list[tuple[ProcInfo, str, int | None]] = []  # (process, reason, GPU bytes)
        done_roots: set[int] = set()
        for pid, info in table.items():
            if pid in own:
                continue
            server = _server_of(info)
            if info.status == psutil.STATUS_ZOMBIE:
                parent = table.get(info.ppid) if info.ppid else None
                if any(s is not None and s.leftover for s in (server, _server_of(parent))):
                    owner = (
                        f"PID {parent.pid} ({short_command(parent.label)})" if parent else f"PID {info.ppid}"
                    )
                    findings.append(
                        (
                            info,
                            f"zombie child of {owner}: it exited but its parent has not "
                            "reaped it — restart or stop the parent",
                            None,
                        )
                    )
                continue
            if server is None or not server.leftover:
                continue
            root = _tree_root(pid, table)
            if root in done_roots:
                continue
            done_roots.add(root)
            findings.extend(self._judge_tree(root, table, kids, ports_of, gpu_pids, endpoint_ports, now))
        out = [self._leftover(info, table, gpu_pids, reason, gpu, used) for info, reason, gpu in findings]
        out.sort(key=lambda lo: (-(lo.gpu_used_bytes or 0), lo.pid))
        return out

    def _judge_tree(
        self,
        root: int,
        table: Mapping[int, ProcInfo],
        kids: Mapping[int, list[int]],
        ports_of: Mapping[int, set[int]],
        gpu_pids: Mapping[int, int],
        endpoint_ports: set[int],
        now: float,
    ) -> list[tuple[ProcInfo, str, int | None]]:
        """What is wrong with one server's process tree (its root and all below), if anything."""
        tree = [root, *descendants(root, kids)]
        # Workers listen too (torch.distributed, ZMQ), but only an API port makes a server "serving".
        api_ports = set().union(*(ports_of.get(p, set()) for p in tree if not _is_worker(table.get(p))))
        on_gpu = [p for p in tree if gpu_pids.get(p)]
        root_info = table[root]
        if api_ports:
            # A serving server: only worth a line when it holds GPU memory behind none of our endpoints.
            if not on_gpu or api_ports & endpoint_ports:
                return []
            total = sum(gpu_pids[p] for p in on_gpu)
            listed = ", ".join(str(p) for p in sorted(api_ports)[:4])
            return [
                (
                    root_info,
                    f"serves port {listed} and holds {memory_size(total)} of GPU memory but is none "
                    f"of lpxtop's endpoints: a stale server? stop it (kill {root}) or add it as an "
                    "endpoint",
                    total,
                )
            ]
        if on_gpu:
            return [
                (
                    table[p],
                    f"holds {memory_size(gpu_pids[p])} of GPU memory but serves no port: left over "
                    f"from a crashed server? stop it (kill {p}) to free the memory",
                    gpu_pids[p],
                )
                for p in on_gpu
            ]
        age = now - root_info.started_at if root_info.started_at else None
        if age is not None and age < self.startup_grace_s:
            return []  # may still be loading weights before it listens
        return [
            (
                root_info,
                f"listens on no port after {message_age(age)}: left over from an old run? "
                f"stop it (kill {root}) if it is not still loading",
                None,
            )
        ]

    def _leftover(
        self,
        info: ProcInfo,
        table: Mapping[int, ProcInfo],
        gpu_pids: Mapping[int, int],
        reason: str,
        gpu_bytes: int | None,
        used: set[int],
    ) -> LeftoverProcess:
        server = _server_of(info) or _server_of(table.get(info.ppid) if info.ppid else None)
        zombie = info.status == psutil.STATUS_ZOMBIE
        rss = None
        if not zombie:
            used.add(info.pid)
            rss = self._facts(info.pid, table)["rss_bytes"]
        return LeftoverProcess(
            pid=info.pid,
            name=info.name,
            user=info.user,
            cmdline=info.cmdline,
            reason=reason,
            gpu_used_bytes=gpu_bytes if gpu_bytes is not None else gpu_pids.get(info.pid),
            server_kind=server.kind if server else None,
            ppid=info.ppid,
            started_at=info.started_at,
            rss_bytes=rss,
            zombie=zombie,
        )


def _server_of(info: ProcInfo | None) -> ServerPattern | None:
    return info.server if info is not None else None


def _is_worker(info: ProcInfo | None) -> bool:
    server = _server_of(info)
    return server is not None and server.worker


def _hidden_owner(port: int, user: str | None = None) -> str:
    if is_root():
        return f"port {port} is held by a process lpxtop cannot see (another container or network namespace?)"
    if user is not None:
        return f"port {port} is held by a process of user {user} (run as root to see which)"
    return f"port {port} is held by another user's process (run as root to see which)"


def user_name(uid: int | None) -> str | None:
    """The login name of `uid` ("uid 1001" when it has none here); None for None."""
    if uid is None:
        return None
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _describe(info: ProcInfo | None, now: float) -> str:
    """``python -m vllm…, started 3 h ago`` for messages."""
    if info is None:
        return "process details hidden"
    age = message_age(now - info.started_at) if info.started_at else "?"
    return f"{short_command(info.label)}, started {age} ago"


def _tree_root(pid: int, table: Mapping[int, ProcInfo]) -> int:
    """The topmost known-server ancestor of `pid` (vLLM's API server above its EngineCore and workers)."""
    root = pid
    for parent in ancestors(pid, table):
        if _server_of(table.get(parent)) is None:
            break
        root = parent
    return root


def _group_listeners(pids: list[int], table: Mapping[int, ProcInfo]) -> list[list[int]]:
    """Split listening PIDs into independent servers, each group's main (topmost, oldest) PID first.

    Listeners of one server stay together: a process and its descendants (forked workers sharing the
    socket), or siblings under one known-server parent (vLLM's API-server processes).
    """
    chains = {p: ancestors(p, table) for p in pids}

    def anchor(p: int) -> int:
        # The topmost listening ancestor (or p), then its parent if that parent is a known server.
        top = p
        for a in chains[p]:
            if a in chains:
                top = a
        if chains[top] and _server_of(table.get(chains[top][0])) is not None:
            return chains[top][0]
        return top

    groups: dict[int, list[int]] = {}
    for p in pids:
        groups.setdefault(anchor(p), []).append(p)

    def age_key(p: int) -> tuple[float, int]:
        info = table.get(p)
        return (info.started_at if info and info.started_at else float("inf"), p)

    ordered = [sorted(g, key=lambda p: (len(chains[p]), age_key(p))) for g in groups.values()]
    return sorted(ordered, key=lambda g: age_key(g[0]))


def _free_port_after(port: int, scan: ListenScan) -> int:
    """The next port above `port` that nothing listens on, for "start it with --port N" advice."""
    for candidate in range(port + 1, min(port + 100, 65536)):
        if candidate not in scan.by_port:
            return candidate
    return port + 1


__all__ = ["PortMonitor", "is_root", "model_matches"]
