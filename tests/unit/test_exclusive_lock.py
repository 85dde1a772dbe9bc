"""The lock that lets a `timing` test run alone under pytest-xdist (tests/support/exclusive.py)."""

from __future__ import annotations

import tempfile
import threading
import time

from tests.support.exclusive import held


def test_a_timing_test_waits_for_the_others_and_none_starts_beside_it(monkeypatch, tmp_path):
    # a run of our own (files in tmp_path), not the one this test runs in
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "selftest")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw9")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    order: list[str] = []
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with held(exclusive=False):
            order.append("other in")
            inside.set()
            release.wait(5)
            order.append("other out")

    def timing() -> None:
        with held(exclusive=True):
            order.append("timing in")

    def late() -> None:
        with held(exclusive=False):
            order.append("late in")

    threads = [threading.Thread(target=f) for f in (other, timing, late)]
    threads[0].start()
    assert inside.wait(5)
    threads[1].start()
    time.sleep(0.2)  # the timing test waits for the other one, holding the turnstile
    threads[2].start()
    time.sleep(0.2)  # and a test that comes later waits behind it: nothing happens meanwhile
    assert order == ["other in"]
    release.set()
    for thread in threads:
        thread.join(5)
    assert order == ["other in", "other out", "timing in", "late in"]


def test_outside_xdist_nothing_is_locked(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    with held(exclusive=True), held(exclusive=True):
        pass
