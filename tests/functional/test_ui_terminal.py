"""The dashboard in a real pseudo-terminal: keys typed as bytes reach it, a lone Esc is a key, it quits.

The pilot tests drive Textual's headless driver; this one runs `lpxtop demo` as a user does, on a pty,
so it covers lpxtop's own terminal driver (ui/quiet_driver.py), whose input thread sleeps until input
comes instead of waking ten times a second.
"""

from __future__ import annotations

import re
import sys
import time

import pytest

from tests.support.pty_terminal import Terminal

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pseudo-terminals")


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
