"""The engine, the model and the headless paths never import Textual (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEADLESS_MODULES = [
    "lpxtop.engine.runner",
    "lpxtop.engine.probe",
    "lpxtop.engine.servers",
    "lpxtop.engine.gpu",
    "lpxtop.engine.host",
    "lpxtop.engine.ports",
    "lpxtop.engine.alerts",
    "lpxtop.engine.discovery",
    "lpxtop.model",
    "lpxtop.assemble",
    "lpxtop.report",
    "lpxtop.cli",
    "lpxtop.sim.server",
    "lpxtop.model.load",
    "lpxtop.load.cli",
    "lpxtop.load.controller",
    "lpxtop.load.source",
    "lpxtop.load.report",
]


@pytest.mark.parametrize("module", HEADLESS_MODULES)
def test_module_does_not_import_textual_or_rich(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'lpxtop.ui')); "
        "bad += sorted(m for m in sys.modules if m.startswith('lpxtop.ui')); "
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"{module} pulled in: {result.stdout.strip()} {result.stderr[-500:]}"


def test_whole_engine_package_has_no_textual_import_statement():
    from pathlib import Path

    import lpxtop.engine

    root = Path(lpxtop.engine.__file__).parent
    offenders = [
        str(p) for p in root.rglob("*.py")
        if any(line.lstrip().startswith(("import textual", "from textual", "import rich", "from rich"))
               for line in p.read_text().splitlines())
    ]
    assert offenders == []


def test_load_package_has_no_textual_import_statement():
    from pathlib import Path

    import lpxtop.load

    root = Path(lpxtop.load.__file__).parent
    offenders = [
        str(p) for p in root.rglob("*.py")
        if any(line.lstrip().startswith(("import textual", "from textual", "import rich", "from rich"))
               for line in p.read_text().splitlines())
    ]
    assert offenders == []
