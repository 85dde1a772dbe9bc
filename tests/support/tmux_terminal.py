"""The real `lpxtop` in a real terminal: tmux on a private socket, at a size, read with `capture-pane -p`.

    with Terminal(["once", "--help"], cols=80, rows=24) as term:   # or the `terminal` fixture (conftest.py)
        screen = term.wait_for("usage:")
        term.keys("Enter"); term.resize(120, 40); term.exit_status()

Every wait is a bounded poll (WAIT_S by default) that fails with the screen it last saw. Each Terminal has
a tmux server of its own (`tmux -L lpxtop-acc-PID-N`), killed on close, so nothing touches anyone else's
sessions. The status bar is off, so the program gets the whole size; a program that exits leaves its last
screen (remain-on-exit) and its exit status (`exit_status`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

WAIT_S = 30.0  # the longest any wait polls (a loaded 2-core CI machine starts the dashboard in seconds)
POLL_S = 0.1
_COUNTER = itertools.count()
TMUX_CONF = """\
set -g status off
set -g remain-on-exit on
set -g history-limit 200
"""


def tmux_missing() -> str | None:
    """Why these tests cannot run here, or None."""
    return None if shutil.which("tmux") else "tmux is not installed (apt-get install tmux)"


class Terminal:
    """`python -m lpxtop ARGS` in a detached tmux session of `cols` x `rows`."""

    def __init__(self, args: Sequence[str], *, cols: int = 80, rows: int = 24, cwd: str | Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.socket = f"lpxtop-acc-{os.getpid()}-{next(_COUNTER)}"
        self._dir = tempfile.TemporaryDirectory(prefix="lpxtop-acc-")
        conf = Path(self._dir.name) / "tmux.conf"
        conf.write_text(TMUX_CONF)
        self._conf = str(conf)
        self._env = {**os.environ, **(env or {})}
        self._env.pop("TMUX", None)  # never attach to the tmux this test may run inside
        # The exit status goes to a file: tmux 3.3 sometimes reports a pane dead with no status when the
        # program exits within moments of starting (a usage error), so its own `pane_dead_status` is not used.
        self._status = Path(self._dir.name) / "exit-status"
        program = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "lpxtop", *args))
        command = f"{program}; s=$?; echo $s > {shlex.quote(str(self._status))}; exit $s"
        self._tmux("new-session", "-d", "-s", "main", "-x", str(cols), "-y", str(rows),
                   "-c", str(cwd or self._dir.name), command)
        self.cols, self.rows = cols, rows

    def _tmux(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, "-f", self._conf, *args], capture_output=True, text=True,
                             timeout=10, env=self._env, check=False)
        if check and out.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args[:2])}: {out.stderr.strip()}")
        return out.stdout

    def screen(self) -> str:
        """What the terminal shows now, one line per row (a line the terminal wrapped is joined back: -J)."""
        return self._tmux("capture-pane", "-p", "-J", "-t", "main", check=False)

    def wait_until(self, ready: Callable[[str], bool], what: str, timeout_s: float = WAIT_S) -> str:
        """The first screen for which `ready(screen)` holds, polled every POLL_S for at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        screen = ""
        while True:
            screen = self.screen()
            if ready(screen):
                return screen
            if time.monotonic() >= deadline:
                raise AssertionError(f"{what}: not on screen within {timeout_s:g} s; the screen "
                                     f"({self.cols}x{self.rows}):\n{screen}")
            time.sleep(POLL_S)

    def wait_for(self, *needles: str, timeout_s: float = WAIT_S) -> str:
        """The first screen that shows every one of `needles`."""
        return self.wait_until(lambda s: all(n in s for n in needles), " and ".join(map(repr, needles)), timeout_s)

    def keys(self, *keys: str, pause_s: float = 0.2) -> None:
        """Type `keys` (tmux key names: Enter, Escape, Right, C-c, or text)."""
        self._tmux("send-keys", "-t", "main", *keys)
        time.sleep(pause_s)

    def resize(self, cols: int, rows: int) -> None:
        self._tmux("resize-window", "-t", "main", "-x", str(cols), "-y", str(rows))
        self.cols, self.rows = cols, rows

    def exit_status(self, timeout_s: float = WAIT_S) -> int:
        """The program's exit status, once it has exited (bounded wait)."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = self._status.read_text().strip() if self._status.exists() else ""
            if status.isdigit():
                return int(status)
            if time.monotonic() >= deadline:
                raise AssertionError(f"the program did not exit within {timeout_s:g} s; the screen:\n{self.screen()}")
            time.sleep(POLL_S)

    def close(self) -> None:
        self._tmux("kill-server", check=False)
        self._dir.cleanup()
        # tmux may leave its socket file behind
        with contextlib.suppress(OSError):
            (Path(self._env.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}" / self.socket).unlink()

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
