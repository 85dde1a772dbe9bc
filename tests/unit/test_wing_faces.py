"""Each wing of lpxtop/engine says what it holds and exports its public names; the lazy faces import nothing
until a name is used, so importing one module of a wing costs no more than that module."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

WINGS = ["lpxtop.engine", "lpxtop.engine.probe", "lpxtop.engine.agent", "lpxtop.engine.scrape",
         "lpxtop.engine.system", "lpxtop.engine.gpu", "lpxtop.engine.gpu.accel", "lpxtop.engine.traces"]
LAZY = ["lpxtop.engine", "lpxtop.engine.agent", "lpxtop.engine.scrape", "lpxtop.engine.system", "lpxtop.engine.gpu",
        "lpxtop.engine.gpu.accel"]


@pytest.mark.parametrize("wing", WINGS)
def test_every_exported_name_resolves_and_the_docstring_says_what_the_wing_holds(wing):
    package = importlib.import_module(wing)
    assert package.__doc__ and len(package.__doc__.split()) > 20
    assert package.__all__ and len(set(package.__all__)) == len(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("wing", LAZY)
def test_importing_a_lazy_face_imports_none_of_its_modules(wing):
    code = (f"import sys, importlib; importlib.import_module({wing!r}); "
            f"print(','.join(sorted(m for m in sys.modules if m.startswith({wing + '.'!r}))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.strip() == ""


def test_a_name_outside_the_face_is_an_attribute_error_and_submodules_still_import():
    import lpxtop.engine.system as system

    with pytest.raises(AttributeError):
        system.no_such_name  # noqa: B018
    from lpxtop.engine.system import actions  # a submodule, not in the face

    assert actions.__name__ == "lpxtop.engine.system.actions"


def test_outside_the_engine_its_names_come_through_the_faces():
    """Code outside lpxtop/engine imports the engine's names from lpxtop.engine or a wing's face, never from
    one of their modules: the faces are what the rest of lpxtop may rely on."""
    import ast
    from pathlib import Path

    faces = set(WINGS) - {"lpxtop.engine.gpu.accel"}
    package = Path(importlib.import_module("lpxtop").__file__).parent
    wrong = []
    for path in sorted(package.rglob("*.py")):
        if path.is_relative_to(package / "engine"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lpxtop.engine"):
                if node.module not in faces:
                    wrong.append(f"{path.relative_to(package.parent)}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import):
                wrong += [f"{path.relative_to(package.parent)}:{node.lineno} import {a.name}" for a in node.names
                          if a.name.startswith("lpxtop.engine.") and a.name not in faces]
    assert not wrong, "\n".join(wrong)
