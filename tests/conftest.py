"""Shared test settings: no user config, no colour surprises, deterministic terminal."""

from __future__ import annotations

import os

import pytest


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
