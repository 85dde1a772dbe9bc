"""What importing a module pulls in, asked of a fresh interpreter (this one has imported everything already).

One child imports every module of a list and reports what it loaded under some prefixes: a module loads no
more alone than beside others, so an empty answer for the list is an empty answer for each of its modules,
for the cost of one interpreter start. Only when something was pulled in does each module get a child of
its own, to name the culprits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

_CHILD = """
import importlib, json, sys
for module in sys.argv[2:]:
    importlib.import_module(module)
packages = json.loads(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if any(m == p or m.startswith(p + ".") for p in packages))))
"""


def _loaded(modules: Sequence[str], packages: Sequence[str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(list(packages)), *modules],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-800:]
    return json.loads(result.stdout)


def pulled_in(modules: Sequence[str], packages: Sequence[str]) -> dict[str, list[str]]:
    """{module: what it loaded of `packages` (each a package or module and everything under it)} for each
    module of `modules` that loads any of them; empty when none does."""
    if not _loaded(modules, packages):
        return {}
    culprits = {module: _loaded([module], packages) for module in modules}
    return {module: found for module, found in culprits.items() if found}
