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
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

WAIT_S = 30.0  # the longest any wait polls (a loaded 2-core CI machine starts the dashboard in seconds)
POLL_S = 0.1
_COUNTER = itertools.count()
TMUX_CONF = """\
set -g status off
set -g remain-on-exit on
set -g history-limit 200
set -g default-shell /bin/sh
"""


SGR = re.compile(r"\x1b\[([0-9;:]*)m")


@dataclass(frozen=True)
class Cell:
    """One character on screen and the attributes it was drawn with (`fg`: an xterm-256 index, an
    (r, g, b) triple, or None for the terminal's default)."""

    char: str
    bold: bool = False
    dim: bool = False
    underline: bool = False
    reverse: bool = False
    fg: int | tuple[int, int, int] | None = None


def parse_styled(text: str) -> list[list[Cell]]:
    """`capture-pane -e` output (text with SGR escapes) as rows of cells. Attributes carry over from row
    to row, as tmux writes them."""
    state = {"bold": False, "dim": False, "underline": False, "reverse": False, "fg": None}
    rows: list[list[Cell]] = []
    for line in text.split("\n"):
        row: list[Cell] = []
        pos = 0
        for m in SGR.finditer(line):
            row.extend(Cell(ch, **state) for ch in line[pos:m.start()])
            pos = m.end()
            _apply_sgr(state, [int(p) if p else 0 for p in re.split("[;:]", m.group(1))])
        row.extend(Cell(ch, **state) for ch in line[pos:])
        rows.append(row)
    return rows


def _apply_sgr(state: dict, params: list[int]) -> None:
    i = 0
    while i < len(params):
        p = params[i]
        if p == 0:
            state.update(bold=False, dim=False, underline=False, reverse=False, fg=None)
        elif p in (1, 2, 4, 7):
            state[{1: "bold", 2: "dim", 4: "underline", 7: "reverse"}[p]] = True
        elif p == 22:
            state.update(bold=False, dim=False)
        elif p == 24:
            state["underline"] = False
        elif p == 27:
            state["reverse"] = False
        elif p == 39:
            state["fg"] = None
        elif 30 <= p <= 37 or 90 <= p <= 97:
            state["fg"] = p - 30 if p < 90 else p - 90 + 8
        elif p in (38, 48) and i + 1 < len(params):
            if params[i + 1] == 5 and i + 2 < len(params):
                if p == 38:
                    state["fg"] = params[i + 2]
                i += 2
            elif params[i + 1] == 2 and i + 4 < len(params):
                if p == 38:
                    state["fg"] = tuple(params[i + 2:i + 5])
                i += 4
        i += 1


def luminance(fg: int | tuple[int, int, int] | None) -> float | None:
    """How light a foreground colour is, 0..255 (None: the terminal's default, unknown)."""
    if fg is None:
        return None
    if isinstance(fg, tuple):
        r, g, b = fg
    elif fg >= 232:  # the grey ramp
        r = g = b = 8 + 10 * (fg - 232)
    elif fg >= 16:  # the 6x6x6 cube
        steps = (0, 95, 135, 175, 215, 255)
        n = fg - 16
        r, g, b = steps[n // 36], steps[n // 6 % 6], steps[n % 6]
    else:  # the 16 system colours, as xterm draws them
        r, g, b = ((0, 0, 0), (205, 0, 0), (0, 205, 0), (205, 205, 0), (0, 0, 238), (205, 0, 205), (0, 205, 205),
                   (229, 229, 229), (127, 127, 127), (255, 0, 0), (0, 255, 0), (255, 255, 0), (92, 92, 255),
                   (255, 0, 255), (0, 255, 255), (255, 255, 255))[fg]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


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
        # The size comes from the terminal: COLUMNS and LINES (pytest-xdist's workers set 80 and 24) go, unless
        # a test sets them itself (lpxtop's dashboard reads the terminal's size whatever they say).
        for name in ("COLUMNS", "LINES"):
            if name not in (env or {}):
                self._env.pop(name, None)
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

    def styled(self) -> list[list[Cell]]:
        """What the terminal shows now, cell by cell with its attributes (`capture-pane -e`)."""
        return parse_styled(self._tmux("capture-pane", "-p", "-e", "-t", "main", check=False))

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
        """The program's exit status once it has exited (128 + N for a signal N, as a shell says), bounded."""
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
