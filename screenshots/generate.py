"""Regenerate the README's screenshots from the real app on the simulated servers.

    python screenshots/generate.py            # writes screenshots/main.svg, detail.svg, server.svg, agent.svg, alerts.svg

It runs `lpxtop demo`'s engine (simulated servers on 127.0.0.1, a simulated GPU) under Textual's
headless driver at 160x48, waits for real measurements, then saves each screen. Run it again whenever
the interface changes.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from lpxtop.demo import start_demo  # noqa: E402
from lpxtop.ui.app import create_app  # noqa: E402

SIZE = (160, 48)


async def wait_until(pilot, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.5)
    return False


async def shoot(out: Path) -> None:
    with start_demo(interval_s=0.5, gpu_surge_gib_s=4.0) as engine:
        app = create_app(engine, theme="lpxtop-dark", on_ready=engine.start)
        async with app.run_test(size=SIZE) as pilot:
            endpoints = lambda: engine.snapshot().endpoints  # noqa: E731
            def ready(e) -> bool:
                chat = "chat" not in e.config.probes or e.probes_ok >= 20
                agent = e.agent is None or e.agent.steps_ok >= 10
                return chat and agent and e.server is not None and len(e.server_history) >= 8

            await wait_until(pilot, lambda: len(endpoints()) == 3 and all(ready(e) for e in endpoints()), 90)
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "main.svg"))
            # sorted by name: dify-app-sim, vllm-sim-a, vllm-sim-b
            await pilot.press("down", "enter")
            await pilot.pause(1.5)
            app.save_screenshot(str(out / "detail.svg"))
            from textual.widgets import TabbedContent

            app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-server"
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "server.svg"))
            await pilot.press("escape", "down", "enter")  # vllm-sim-b
            await pilot.pause(1.0)
            app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-agent"
            await pilot.pause(1.5)
            app.save_screenshot(str(out / "agent.svg"))
            await pilot.press("escape")
            engine.request_surge(True)
            app.surge = True
            found = await wait_until(
                pilot, lambda: any(a.kind == "gpu_memory" for a in engine.snapshot().alerts), 60)
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "alerts.svg"))
            print("alerts:", [a.message for a in engine.snapshot().alerts] if found else "none appeared")


def main() -> int:
    asyncio.run(shoot(HERE))
    for name in ("main.svg", "detail.svg", "server.svg", "agent.svg", "alerts.svg"):
        print("wrote", HERE / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
