"""Textual's terminal driver for Linux and macOS, with an input thread that sleeps until there is input.

Textual 8.2's input thread polls: a select() with a 0.1 s timeout, ten wake-ups a second, only to look
at its exit flag and at the escape-key timer. On a monitored server that is ~0.1 % of a core, about a
twentieth of all lpxtop costs. This driver's thread blocks until one of three things happens: bytes
on stdin (keys, mouse, terminal replies), a byte on its own wake-up pipe (the exit), or the moment
the key parser is waiting for (a lone Escape is a key only once no sequence follows it in time).

It reads the parser's pending deadline (`_timeout_time`), a private attribute of the pinned Textual
release; without it, it polls as Textual does.

It also takes the terminal's size from the terminal itself, as htop and nvitop do: Textual asks
`shutil.get_terminal_size`, which prefers $COLUMNS and $LINES, and a shell that exported them at one size
would leave the dashboard at that size through every resize.
"""

from __future__ import annotations

import logging
import os
import selectors
import sys
import time
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

log = logging.getLogger(__name__)

POLL_S = 0.1  # Textual's own period, used when the parser's deadline cannot be read
EXIT_WAIT_S = 1.0  # the wake-up byte comes just before the exit flag: how long to wait for the flag


class QuietLinuxDriver(LinuxDriver):
    """LinuxDriver whose input thread wakes only for input, exit, or the parser's escape-key deadline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.input_wakeups = 0  # how often the input thread woke up (logged at close, for tests and curious users)
        self._input_seconds = 0.0

    def _get_terminal_size(self) -> tuple[int, int]:
        for stream in (self._file, sys.__stdin__):  # the terminal Textual draws on, then its input
            try:
                size = os.get_terminal_size(stream.fileno())
            except (AttributeError, ValueError, OSError):  # no stream, a closed one, or not a terminal
                continue
            if size.columns > 0 and size.lines > 0:
                return size.columns, size.lines
        return super()._get_terminal_size()

    def disable_input(self) -> None:
        # Wake the thread first: Textual sets the exit flag and joins the thread right after.
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # the pipe is full (a byte is already waiting) or closed
            pass
        super().disable_input()
        try:
            while os.read(self._wake_r, 512):  # the thread has stopped: empty the pipe for a later start
                pass
        except OSError:  # BlockingIOError: empty
            pass

    def close(self) -> None:
        log.debug("input thread: %d wake-ups in %.1f s", self.input_wakeups, self._input_seconds)
        super().close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def run_input_thread(self) -> None:
        """Read input and post it to the app as events, until the exit flag is set."""
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        stdin, wake = self.fileno, self._wake_r
        selector = selectors.DefaultSelector()
        selector.register(stdin, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        began = time.monotonic()
        try:
            while not self.exit_event.is_set():
                ready = selector.select(self._timeout(parser))
                self.input_wakeups += 1
                for key, _mask in ready:
                    if key.fd == wake:
                        # The exit: the flag follows the byte at once. The byte stays until disable_input
                        # empties the pipe, so a wait cut short here cannot block the next select.
                        self.exit_event.wait(EXIT_WAIT_S)
                        continue
                    data = os.read(stdin, 4096)
                    if not data:  # end of input (stdin is not a terminal): stop watching it, do not spin
                        selector.unregister(stdin)
                        continue
                    text = decode(data)
                    if text:  # empty when the read ended inside a multi-byte character
                        for event in parser.feed(text):
                            self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
            text = decode(b"", final=True)
            for event in parser.feed(text) if text else ():
                self.process_message(event)
            for event in parser.tick():
                self.process_message(event)
        finally:
            selector.close()
            self._input_seconds += time.monotonic() - began

    @staticmethod
    def _timeout(parser: XTermParser) -> float | None:
        """Seconds until the parser's pending deadline; None (no timeout) when it waits for nothing."""
        try:
            deadline = parser._timeout_time  # noqa: SLF001 - private in Textual; see the module docstring
        except AttributeError:
            return POLL_S
        if deadline is None:
            return None
        return max(0.0, deadline - get_time())
