"""What checking tool-call arguments costs: lpxtop's schema subset (engine/agent/schema.py) vs `jsonschema`.

    python benchmarks/agent_schema.py

Prints the import time and memory of `jsonschema` (measured in a fresh interpreter), and the time of
one validation of the default tools' arguments with each. The figures are in schema.py's docstring.
"""

from __future__ import annotations

import subprocess
import sys
import timeit

IMPORT_PROBE = (
    "import os, time\n"
    "def rss(): return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20\n"
    "r0 = rss(); t0 = time.perf_counter()\n"
    "import {module}\n"
    "t1 = time.perf_counter(); print((t1 - t0) * 1000, rss() - r0)"
)


def import_cost(module: str, runs: int = 5) -> tuple[float, float]:
    times, rss = [], []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", IMPORT_PROBE.format(module=module)], capture_output=True,
                             text=True, check=True).stdout.split()
        times.append(float(out[0]))
        rss.append(float(out[1]))
    times.sort()
    rss.sort()
    return times[len(times) // 2], rss[len(rss) // 2]


def main() -> int:
    from lpxtop.engine.agent.schema import validate
    from lpxtop.engine.agent.tools import DEFAULT_TOOLS

    cases = [
        (DEFAULT_TOOLS[0]["function"]["parameters"], {"city": "Zürich", "unit": "celsius"}),
        (DEFAULT_TOOLS[1]["function"]["parameters"], {"query": "streaming tool calls", "top_k": 3}),
        (DEFAULT_TOOLS[2]["function"]["parameters"], {"timezone": "Europe/Paris"}),
    ]
    n = 20_000
    ours = min(timeit.repeat(lambda: [validate(i, s) for s, i in cases], number=n, repeat=5)) / (n * len(cases))
    print(f"lpxtop schema.validate: {ours * 1e6:.1f} us per call")
    try:
        import jsonschema
    except ImportError:
        print("jsonschema is not installed (pip install jsonschema) : no comparison")
        return 0
    validators = [(jsonschema.Draft202012Validator(s), i) for s, i in cases]
    lib = min(timeit.repeat(lambda: [v.is_valid(i) for v, i in validators], number=n, repeat=5)) / (n * len(cases))
    print(f"jsonschema is_valid (validator built once): {lib * 1e6:.1f} us per call")
    ms, mb = import_cost("jsonschema")
    base_ms, base_mb = import_cost("json")
    print(f"import jsonschema: {ms - base_ms:.0f} ms, +{mb - base_mb:.1f} MB RSS (median of 5 fresh interpreters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
