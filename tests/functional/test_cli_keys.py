"""A key typed on the command line, as a real `lpxtop` process meets it: exit 2, why, what instead, never the key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SECRET = "sk-firstcontact-0f9e8d7c6b5a"


def run(*args: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LPXTOP_LOG": "DEBUG"}  # whatever is logged, the key is not
    return subprocess.run([sys.executable, "-m", "lpxtop", *args], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)


@pytest.mark.parametrize(
    "args",
    [
        ("once", "127.0.0.1:9", "--api-key", SECRET),
        ("once", "127.0.0.1:9", f"--api-key={SECRET}", "--json"),
        ("127.0.0.1:9", "--api-key", SECRET),  # the dashboard: refused before any screen opens
        ("load", "127.0.0.1:9", "--api-ke", SECRET, "--concurrency", "1"),
        ("exporter", "127.0.0.1:9", f"--api-k={SECRET}"),
    ],
    ids=["once", "once-equals", "dashboard", "load-abbrev", "exporter-abbrev"],
)
def test_api_key_value_is_a_usage_error_that_never_echoes_it(args, tmp_path):
    result = run(*args, tmp_path=tmp_path)
    assert result.returncode == 2
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert result.stdout == ""
    assert "every user of this machine can read a command line (ps, /proc/PID/cmdline)" in result.stderr
    assert "--api-key-env OPENAI_API_KEY" in result.stderr
    assert "Traceback" not in result.stderr
    assert not any(SECRET in p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
