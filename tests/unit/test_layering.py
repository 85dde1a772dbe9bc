"""Layers: the engine, the model and the headless paths never import Textual (checked in a fresh interpreter);
lpxtop/ has no import circle; outside lpxtop/http only its public face is imported."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.imports import pulled_in

HEADLESS_MODULES = [
    "lpxtop.engine.runner",
    "lpxtop.engine.probe",
    "lpxtop.engine.scrape.servers",
    "lpxtop.engine.gpu.collector",
    "lpxtop.engine.system.host",
    "lpxtop.engine.system.ports",
    "lpxtop.engine.alerts",
    "lpxtop.engine.system.discovery",
    "lpxtop.engine.probe.schedule",
    "lpxtop.jsonout",
    "lpxtop.humanize",
    "lpxtop.http",
    "lpxtop.model",
    "lpxtop.model.server_gap",
    "lpxtop.cli.assemble",
    "lpxtop.report",
    "lpxtop.cli.entry",
    "lpxtop.cli.once",
    "lpxtop.cli.dashboard",  # the UI only inside the function that opens it
    "lpxtop.cli.record",
    "lpxtop.sim.server",
    "lpxtop.export.exporter",
    "lpxtop.cli.exporter",
    "lpxtop.fleet.source",
    "lpxtop.cli.fleet",
    "lpxtop.record.recorder",
    "lpxtop.record.replay",  # also reading, store, codec
    "lpxtop.record.export",
    "lpxtop.engine.agent.prober",  # the agent-step probe: imports every module of lpxtop/engine/agent
    "lpxtop.model.load",
    "lpxtop.cli.load",
    "lpxtop.load.controller",
    "lpxtop.load.source",
    "lpxtop.load.report",
    "lpxtop.load.recording",
    "lpxtop.cli.otlp",
    "lpxtop.otel.pipeline",  # also spans, measures, aggregate, semconv, settings
    "lpxtop.engine.traces",  # also receiver, join, forward, settings
    "lpxtop.engine.traces.settings",
]


def test_headless_modules_do_not_import_textual_or_rich():
    # one fresh interpreter for the list (each module alone only when one fails: tests/support/imports.py)
    assert pulled_in(HEADLESS_MODULES, ("textual", "rich", "lpxtop.ui")) == {}


# The feature packages are headless: only lpxtop/cli (inside the functions that open the dashboard) and
# lpxtop/ui itself import Textual, Rich or lpxtop.ui.
HEADLESS_PACKAGES = ["lpxtop.engine", "lpxtop.http", "lpxtop.model", "lpxtop.export", "lpxtop.fleet", "lpxtop.record",
                     "lpxtop.otel", "lpxtop.load", "lpxtop.sim"]
UI_IMPORTS = ("import textual", "from textual", "import rich", "from rich", "import lpxtop.ui", "from lpxtop.ui")


@pytest.mark.parametrize("package", HEADLESS_PACKAGES)
def test_whole_headless_package_has_no_textual_or_ui_import_statement(package):
    import importlib

    root = Path(importlib.import_module(package).__file__).parent
    offenders = [
        str(p) for p in root.rglob("*.py")
        if any(line.lstrip().startswith(UI_IMPORTS) for line in p.read_text().splitlines())
    ]
    assert offenders == []


def test_every_command_line_module_lives_in_lpxtop_cli():
    """argparse is the command line's: no feature package holds a `cli.py` of its own."""
    strays = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "lpxtop").rglob("cli.py"))
    assert strays == []


# --- Import circles and the HTTP wing's face, read from the source with `ast` (nothing imported) ---

ROOT = Path(__file__).resolve().parents[2]

def _module_names(root: Path, package: str) -> dict[str, Path]:
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, module-level or inside functions and classes, except under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:
                yield from _imports(ast.Module(body=[branch], type_ignores=[]))
        elif isinstance(node, (ast.stmt, ast.excepthandler, ast.match_case)):  # an expression holds no import
            yield from _imports(node)


@functools.cache
def _file_imports(path: Path) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The file's import statements (`_imports`), parsed once for all the tests here. Only they are kept:
    the whole trees of the repository's files are ~750,000 objects, which every later full garbage
    collection in the test process would walk."""
    return tuple(_imports(ast.parse(path.read_text(), path.relative_to(ROOT).as_posix())))


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str | None]]:
    """(module, name or None) for each thing `node` imports, relative imports resolved."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, node.module] if node.module else parts)
    for alias in node.names:
        yield base, alias.name


def _import_graph() -> dict[str, set[str]]:
    """lpxtop's modules and, for each, the lpxtop modules it imports (a package counts as its __init__;
    the parent packages that an import runs first are left out: a package's __init__ importing its own
    modules is not a circle)."""
    modules = _module_names(ROOT / "lpxtop", "lpxtop")
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in _file_imports(path):
            for target, member in _imported(node, name, path.name == "__init__.py"):
                if member is not None and f"{target}.{member}" in modules:
                    target = f"{target}.{member}"  # from a package import one of its modules
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_circle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]


def test_imports_are_read_at_module_level_and_in_functions_but_not_under_type_checking():
    source = (
        "import a.b\nfrom . import c\nfrom .d import e\nif TYPE_CHECKING:\n    import f\nelse:\n    import g\n"
        "def h():\n    from i import j\nif typing.TYPE_CHECKING:\n    import k\n"
    )
    found = [pair for node in _imports(ast.parse(source)) for pair in _imported(node, "pkg.mod", False)]
    assert found == [("a.b", None), ("pkg", "c"), ("pkg.d", "e"), ("g", None), ("i", "j")]


def test_the_import_graph_of_lpxtop_has_no_circle():
    graph = _import_graph()
    assert "lpxtop.sim.toolcall_options" in graph["lpxtop.sim.config"]  # the graph is read at all
    circles = sorted(sorted(c) for c in _circles(graph))
    assert circles == [], f"import circles in lpxtop/: {circles}"


# The HTTP wing's white-box tests (and their reference harness) and the benchmark that counts its reads may
# name its modules.
HTTP_INSIDERS = ("tests/http/", "tests/support/http_reference.py", "benchmarks/http_cost.py")


def test_outside_lpxtop_http_only_its_public_face_is_imported():
    import lpxtop.http

    face = set(lpxtop.http.__all__)
    offenders = []
    for folder in ("lpxtop", "tests", "benchmarks", "screenshots"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where.startswith("lpxtop/http/") or where.startswith(HTTP_INSIDERS):
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in _file_imports(path):
                for target, member in _imported(node, module, path.name == "__init__.py"):
                    if target.startswith("lpxtop.http."):
                        offenders.append(f"{where}:{node.lineno}: imports {target}")
                    elif target == "lpxtop.http" and member is not None and member not in face:
                        offenders.append(f"{where}:{node.lineno}: imports {member}, not in lpxtop.http.__all__")
                    elif target == "lpxtop" and member == "http":
                        offenders.append(f"{where}:{node.lineno}: imports the module lpxtop.http (import names)")
    assert offenders == []
