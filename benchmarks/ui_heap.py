#!/usr/bin/env python3
"""The dashboard's heap while a user opens and closes the detail screen, with Textual's style-cache leak
mended (lpxtop/ui/textual_fixes.py) and without, side by side.

Each variant runs in a process of its own: the demo's simulated servers and engine, the real app headless
(Textual's `run_test`, 160x48), and a user who every 3 s opens an endpoint's detail screen, moves to the
next tab and goes back. Every `--every` cycles it prints the objects the garbage collector tracks (the
objects frozen at start-up left out), how long a full collection takes when nothing is left to free (the
walk of the live heap, which every full collection pays), and how many entries Textual's
`get_inner_outer` cache holds. A full collection holds the interpreter lock, so its length is how long a
probe's read can wait behind it.

usage: python benchmarks/ui_heap.py [--seconds 120] [--every 5] [--variants mended,unmended]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import subprocess
import sys
import time

VARIANTS = ("mended", "unmended")


async def run_variant(seconds: float, every: int, mended: bool) -> None:
    import lpxtop.ui.app as app_module
    from lpxtop.cli.dashboard import start_measuring
    from lpxtop.cli.demo import start_demo

    if not mended:
        app_module.mend_styles_cache_leak = lambda *_: False  # the factory calls it: make it do nothing
    from textual._styles_cache import StylesCache

    with start_demo(interval_s=1.0, readonly=True) as demo:
        app = app_module.create_app(demo.engine, readonly=True, on_ready=lambda: start_measuring(demo.engine))
        try:
            async with app.run_test(size=(160, 48)) as pilot:
                began, cycles = time.monotonic(), 0
                while time.monotonic() - began < seconds:
                    for key in ("enter", "right", "escape"):
                        await pilot.press(key)
                        await pilot.pause(1.0)
                    cycles += 1
                    if cycles % every == 0:
                        gc.collect()  # what the closed screens left to free, freed
                        t = time.perf_counter()
                        gc.collect()  # timed: a walk of the live heap alone
                        full_ms = (time.perf_counter() - t) * 1e3
                        cache = StylesCache.get_inner_outer.cache_info().currsize
                        print(f"{time.monotonic() - began:7.0f} {cycles:7d} {len(gc.get_objects()):10,d} "
                              f"{full_ms:10.0f} {cache:8d}", flush=True)
        finally:
            demo.engine.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--every", type=int, default=5, help="print every N open-and-close cycles")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one variant, in this process
    args = parser.parse_args()
    if args.variant:
        asyncio.run(run_variant(args.seconds, args.every, args.variant == "mended"))
        return 0
    procs = {}
    for variant in args.variants.split(","):
        procs[variant] = subprocess.Popen(
            [sys.executable, __file__, "--variant", variant, "--seconds", str(args.seconds), "--every", str(args.every)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for variant, proc in procs.items():
            out, _ = proc.communicate(timeout=args.seconds + 120)
            print(f"\n{variant}" + (" (the variants ran at once, on the same machine)" if len(procs) > 1 else ""))
            print(f"{'s':>7} {'cycles':>7} {'objects':>10} {'full GC ms':>10} {'cache':>8}")
            print(out.rstrip() or f"(no figures; exit status {proc.returncode})")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
