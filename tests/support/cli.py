"""`lpxtop ...` run by a test: in the test's own process (`run_cli`, no interpreter start-up per call:
stdout, stderr and the exit status, as a subprocess would give them), or as a child process (`lpxtop`)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from lpxtop.cli.entry import main


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(capsys, *args: str) -> CliResult:
    """main(args) with its output captured; the interpreter's switch interval (which `once` sets) restored."""
    capsys.readouterr()
    switch = sys.getswitchinterval()
    try:
        code = main(list(args))
    finally:
        sys.setswitchinterval(switch)
    out = capsys.readouterr()
    return CliResult(code, out.out, out.err)


def lpxtop(*args: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    """`python -m lpxtop ARGS` in a child process, its output captured as text (bounded by `timeout`)."""
    return subprocess.run(
        [sys.executable, "-m", "lpxtop", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
    )
