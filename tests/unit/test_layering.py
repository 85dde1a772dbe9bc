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
    "lpxtop.engine.schedule",
    "lpxtop.jsonout",
    "lpxtop.http",
    "lpxtop.model",
    "lpxtop.model.server_gap",
    "lpxtop.assemble",
    "lpxtop.report",
    "lpxtop.cli",
    "lpxtop.sim.server",
    "lpxtop.export.exporter",
    "lpxtop.export.cli",
    "lpxtop.fleet.source",
    "lpxtop.fleet.cli",
    "lpxtop.record.recorder",
    "lpxtop.record.replay",  # also reading, store, codec
    "lpxtop.record.export",
    "lpxtop.engine.agent.prober",  # the agent-step probe: imports every module of lpxtop/engine/agent
    "lpxtop.model.load",
    "lpxtop.load.cli",
    "lpxtop.load.controller",
    "lpxtop.load.source",
    "lpxtop.load.report",
    "lpxtop.load.recording",
    "lpxtop.otel.cli",
    "lpxtop.otel.pipeline",  # also spans, measures, aggregate, semconv, settings
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


@pytest.mark.parametrize("package", ["lpxtop.engine", "lpxtop.export", "lpxtop.fleet", "lpxtop.record", "lpxtop.otel"])
def test_whole_headless_package_has_no_textual_import_statement(package):
    import importlib
    from pathlib import Path

    root = Path(importlib.import_module(package).__file__).parent
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
