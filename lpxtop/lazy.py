"""A package's public face, imported on first use (PEP 562 `__getattr__`), so that importing one module of a
wing (which runs the wing's `__init__` first) costs nothing more, and no import circle can form through it.

    __all__ = ["Engine", "EngineSettings"]
    __getattr__, __dir__ = lazy_exports(__name__, {"lpxtop.engine.runner": ("Engine", "EngineSettings")})

A name not in the face raises AttributeError, so `from package import submodule` still imports the submodule.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose public names live in `modules` (module -> names)."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # from now on a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
