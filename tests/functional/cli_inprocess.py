"""`lpxtop ...` run in the test's own process (no interpreter start-up per call): stdout, stderr and
the exit status, as a subprocess would give them."""

from __future__ import annotations

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
