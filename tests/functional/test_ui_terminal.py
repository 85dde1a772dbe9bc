"""The dashboard in a real pseudo-terminal: keys typed as bytes reach it, a lone Esc is a key, it quits.

The pilot tests drive Textual's headless driver; this one runs `lpxtop demo` as a user does, on a pty,
so it covers lpxtop's own terminal driver (ui/quiet_driver.py), whose input thread sleeps until input
comes instead of waking ten times a second.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")


class Terminal:
    """A pty of 120x40 with lpxtop running on it; everything it writes is kept in `output`."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "LPXTOP_LOG": "DEBUG"}
        env.pop("TEXTUAL_DRIVER", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "lpxtop", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, start_new_session=True, close_fds=True)
        os.close(slave)
        self.master = master
        self.output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            with self._lock:
                self.output += data

    def text(self) -> str:
        with self._lock:
            raw = bytes(self.output)
        return re.sub(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]", "", raw.decode("utf-8", "replace"))

    def wait_for(self, needle: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{needle!r} never appeared; the screen's end:\n{self.text()[-2000:]}")

    def forget(self) -> None:
        with self._lock:
            self.output.clear()

    def type(self, keys: bytes, pause_s: float = 0.3) -> None:
        os.write(self.master, keys)
        time.sleep(pause_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self.master)


def test_keys_reach_the_dashboard_and_a_lone_escape_is_a_key():
    term = Terminal("demo")
    try:
        term.wait_for("Endpoints")
        term.type(b"?")
        term.wait_for("empty every window")  # the help screen
        term.forget()
        # A lone Esc: the parser can only tell it from an escape sequence once nothing follows in time,
        # so the input thread must wake for that deadline, not only for bytes.
        term.type(b"\x1b", pause_s=0.6)
        term.type(b"/", pause_s=0.5)
        term.type(b"zz")
        term.wait_for("No endpoint matches the filter 'zz'")  # help closed, then the filter took the keys
        term.forget()
        term.type(b"\x1b", pause_s=0.6)
        term.type(b"q", pause_s=0)
        assert term.proc.wait(15) == 0, term.text()[-2000:]
        time.sleep(0.2)
        found = re.search(r"input thread: (\d+) wake-ups in ([\d.]+) s", term.text())
        assert found, term.text()[-2000:]
        wakeups, seconds = int(found.group(1)), float(found.group(2))
        # 7 reads of typed keys, 2 escape deadlines and the exit; Textual's own thread wakes 10 times a
        # second whatever happens, which is 20 or more here
        assert seconds >= 2.0 and wakeups <= 14, (wakeups, seconds)
    finally:
        term.close()
