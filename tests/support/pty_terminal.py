"""The dashboard in a real pseudo-terminal: `lpxtop ARGS` on a pty of 120x40, everything it writes kept."""

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


class Terminal:
    """A pty of 120x40 with lpxtop running on it; everything it writes is kept in `output`."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        # the size comes from the pty, not from COLUMNS and LINES (pytest-xdist's workers set them)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(TERM="xterm-256color", LPXTOP_LOG="DEBUG")
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

    def output_after_exit(self, timeout_s: float = 5.0) -> bytes:
        """Everything the process wrote, once it has exited and its last bytes are read (bounded)."""
        self.proc.wait(timeout_s)
        self._reader.join(timeout_s)  # the reader ends at the terminal's EIO, after the last byte
        with self._lock:
            return bytes(self.output)

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
