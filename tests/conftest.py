"""Shared test settings: no user config, no colour surprises, deterministic terminal."""

from __future__ import annotations

import os

import pytest

from tests.support.exclusive import MARKER, held


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # The `timing` tests form one xdist group (--dist loadgroup): one worker runs them one after another,
    # so the lock below is taken once for the lot rather than once a test.
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            item.add_marker(pytest.mark.xdist_group(MARKER))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # A test marked `timing` runs alone under pytest-xdist (tests/support/exclusive.py): the exclusive lock
    # is held from the first of a run of timing tests to the end of the last.
    timing = item.get_closest_marker(MARKER) is not None
    next_timing = nextitem is not None and nextitem.get_closest_marker(MARKER) is not None
    if not timing:
        with held(exclusive=False):
            yield
        return
    if _timing_lock[0] is None:
        _timing_lock[0] = held(exclusive=True)
        _timing_lock[0].__enter__()
    try:
        yield
    finally:
        if not next_timing:
            lock, _timing_lock[0] = _timing_lock[0], None
            lock.__exit__(None, None, None)


_timing_lock: list = [None]  # the exclusive lock while a run of timing tests goes on in this worker


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch, tmp_path_factory):
    # Never read the developer's own config or themes; never inherit an SSH session's settings.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
    # ... and never write recordings into the developer's own state directory (`lpxtop load` records by default)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    os.environ.setdefault("TEXTUAL", "")
    yield
