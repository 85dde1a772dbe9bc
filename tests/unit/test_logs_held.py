"""Log records wait while a full-screen view owns the terminal, and come out in order after it."""

from __future__ import annotations

import logging
import sys

from lpxtop.cli import common
from lpxtop.cli.common import logs_held_while_drawing


def test_records_wait_for_the_screen_and_then_come_out_in_order(capsys, monkeypatch):
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    monkeypatch.setattr(common, "HELD_LOG_RECORDS", 3)
    try:
        with logs_held_while_drawing():
            log = logging.getLogger("lpxtop.test")
            log.debug("below the handler's level")
            for i in range(5):
                log.warning("record %d", i)
            assert capsys.readouterr().err == ""  # nothing written over the screen
        err = capsys.readouterr().err.splitlines()
        assert err == ["2 earlier log records were dropped while the screen was drawn",
                       "record 2", "record 3", "record 4"]
        assert handler in root.handlers
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
