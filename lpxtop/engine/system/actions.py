"""Process actions the UI offers (stop a leftover server): every refusal rule lives here, not in the UI.

The UI first shows `confirmation(pid, sig)` in a dialog, then calls `send_signal(...)` with the
`started_at` it showed, so a PID reused in between is never signalled. `--readonly` refuses everything.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import psutil

from lpxtop.engine.system.ports import is_root
from lpxtop.engine.system.shown import escaped, redact_argv, safe_name, short_command
from lpxtop.humanize import message_age

READONLY_REFUSAL = "read-only mode (--readonly): process actions are disabled"


@dataclass(frozen=True)
class ActionResult:
    """What happened; `message` is ready to show to the user."""

    ok: bool
    message: str


@dataclass(frozen=True)
class Confirmation:
    """What a confirmation dialog must show before a signal is sent.

    `refusal` is set when the action would be refused anyway (the dialog should say so and offer
    no "yes"). Pass `started_at` back to `send_signal` so that a reused PID is not signalled.
    """

    pid: int
    signal_name: str
    user: str | None
    name: str
    cmdline: str
    started_at: float | None
    refusal: str | None

    @property
    def text(self) -> str:
        """The dialog body: what will be signalled, by whom it is owned, since when."""
        age = f"{message_age(time.time() - self.started_at)} ago" if self.started_at else "?"
        lines = [
            f"Send {self.signal_name} to PID {self.pid}?",
            f"user:    {escaped(self.user or '?')}",
            f"command: {escaped(self.cmdline or self.name or '?')}",
            f"started: {age}",
        ]
        if self.refusal:
            lines.append(f"refused: {self.refusal}")
        return "\n".join(lines)


def _signal_name(sig: int) -> str | None:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return None


def _protected_pids() -> dict[int, str]:
    """lpxtop itself and the chain of processes it runs under (its shell, terminal, tmux…)."""
    me = os.getpid()
    protected = {me: "it is lpxtop itself"}
    try:
        for parent in psutil.Process(me).parents():
            protected[parent.pid] = f"it runs lpxtop (an ancestor of PID {me})"
    except (psutil.Error, OSError):
        pass  # the parent chain is a courtesy; lpxtop's own PID is always protected
    return protected


def check_signal_allowed(pid: int) -> str | None:
    """None when lpxtop may signal `pid`, else the reason it refuses (a sentence for the user).

    Refused: PIDs <= 1 (0 and negatives address process groups; 1 is init), lpxtop and its parent
    chain, zombies (nothing left to stop), other users' processes unless we are root.
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return f"PID {pid!r} is not a single process (0 and negative numbers address process groups)"
    if pid == 1:
        return "PID 1 is the init process: lpxtop never signals it"
    protected = _protected_pids()
    if pid in protected:
        return f"PID {pid} is protected: {protected[pid]}"
    try:
        proc = psutil.Process(pid)
        status = proc.status()
        uids = proc.uids()
    except psutil.NoSuchProcess:
        return f"no process with PID {pid} (it has already exited)"
    except (psutil.Error, OSError, AttributeError) as exc:  # AttributeError: no uids() off POSIX
        return f"PID {pid} cannot be inspected ({type(exc).__name__}): run as root to act on it"
    if status == psutil.STATUS_ZOMBIE:
        return f"PID {pid} is a zombie: it has already exited; stop or restart its parent to reap it"
    # The kernel's rule: our uid must be the target's real or saved uid (root may signal anyone).
    if not is_root() and os.geteuid() not in (uids.real, uids.saved):
        try:
            owner = proc.username()
        except (psutil.Error, KeyError, OSError):
            owner = f"uid {uids.real}"
        return (
            f"PID {pid} belongs to {owner}: lpxtop only signals your own processes (run as root to stop it)"
        )
    return None


def confirmation(pid: int, sig: int = signal.SIGTERM) -> Confirmation:
    """The facts to show before signalling `pid`, including why it would be refused (if it would)."""
    refusal = check_signal_allowed(pid)
    name = cmdline = ""
    user = started_at = None
    if isinstance(pid, int) and pid > 0:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = safe_name(proc.name()) or ""
                started_at = proc.create_time()
                try:
                    user = proc.username()
                except (psutil.Error, KeyError):
                    pass
                try:
                    cmdline = " ".join(redact_argv(proc.cmdline()))
                except psutil.Error:
                    pass
        except (psutil.Error, OSError):
            pass
    sig_name = _signal_name(sig)
    if sig_name is None:
        refusal = refusal or f"{sig!r} is not a signal"
    return Confirmation(pid, sig_name or str(sig), user, name, cmdline, started_at, refusal)


def send_signal(pid: int, sig: int, *, readonly: bool, started_at: float | None = None) -> ActionResult:
    """Send `sig` to `pid` after every check; never raises.

    `started_at`: the start time shown in the confirmation dialog; when given and the PID now
    belongs to a process started at another time, nothing is sent.
    """
    if readonly:
        return ActionResult(False, READONLY_REFUSAL)
    sig_name = _signal_name(sig)
    if sig_name is None:
        return ActionResult(False, f"{sig!r} is not a signal")
    refusal = check_signal_allowed(pid)
    if refusal is not None:
        return ActionResult(False, refusal)
    try:
        proc = psutil.Process(pid)
        if started_at is not None and abs(proc.create_time() - started_at) > 0.01:
            return ActionResult(
                False, f"PID {pid} is now a different process (the one you chose exited): nothing sent"
            )
        label = " ".join(redact_argv(proc.cmdline())) or safe_name(proc.name()) or ""
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        return ActionResult(False, f"PID {pid} has already exited: nothing sent")
    except psutil.AccessDenied:
        return ActionResult(
            False, f"permission denied sending {sig_name} to PID {pid}: run as root to stop it"
        )
    except (psutil.Error, OSError) as exc:
        return ActionResult(False, f"could not signal PID {pid}: {exc}")
    return ActionResult(True, f"sent {sig_name} to PID {pid} ({short_command(label, 60)})")
