"""How tests and benchmarks share code: through tests/support only. No test module (nor conftest.py) imports
another test module or a sibling by its bare name, and no benchmark edits sys.path (the development
install puts the repository root on it: docs/testing.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = "tests.support"


def _sources(*folders: str) -> Iterator[tuple[str, ast.Module]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            yield where, ast.parse(path.read_text(encoding="utf-8"), where)


def _statements(node: ast.AST) -> Iterator[ast.AST]:
    """Every statement, nested ones too (an import is a statement: no need to walk the expressions)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield child
            yield from _statements(child)


def _targets(tree: ast.Module, where: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import in the file, function-local ones included; relative ones resolved."""
    package = where.rsplit("/", 1)[0].replace("/", ".")
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield node.lineno, f"{base}.{node.module}" if node.module else base
                if not node.module:
                    for alias in node.names:
                        yield node.lineno, f"{base}.{alias.name}"
            else:
                yield node.lineno, node.module or ""


def test_tests_and_benchmarks_share_code_only_through_tests_support():
    offenders = []
    for where, tree in _sources("tests", "benchmarks"):
        here = (ROOT / where).parent
        for line, target in _targets(tree, where):
            top = target.split(".")[0]
            if target == "tests" or (top == "tests" and not (target == SUPPORT or target.startswith(SUPPORT + "."))):
                offenders.append(f"{where}:{line}: imports {target} (shared code lives in tests/support)")
            elif top != "tests" and (here / f"{top}.py").exists():
                offenders.append(f"{where}:{line}: imports its sibling {top} by bare name")
    assert offenders == []


def test_no_module_in_tests_support_is_a_test_module():
    names = sorted(p.name for p in (ROOT / "tests" / "support").glob("*.py"))
    assert names and not [n for n in names if n.startswith("test_") or n == "conftest.py"]


def test_every_helper_module_under_tests_lives_in_tests_support():
    """Outside tests/support a .py file is a test module, a conftest.py, a package's __init__.py, or a
    program run on its own (a fixture's capture script, the GPU test's child process)."""
    programs = {"tests/gpu/cuda_holder.py"}
    stray = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        if where.startswith(("tests/support/", "tests/fixtures/", "tests/integration/realservers/")):
            continue
        if path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py") or where in programs:
            continue
        stray.append(where)
    assert stray == []


def test_benchmarks_never_edit_sys_path():
    offenders = [
        f"{where}:{node.lineno}"
        for where, tree in _sources("benchmarks")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "path"
        and isinstance(node.value, ast.Name) and node.value.id == "sys"
    ]
    assert offenders == []
