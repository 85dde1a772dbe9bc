"""Regenerate the README's screenshots from the real app on the simulated servers.

    python screenshots/generate.py     # main, detail, server, agent, alerts (160x48); main-80x24, nogpu-80x24, load-80x24

It runs `lpxtop demo`'s engine (simulated servers on 127.0.0.1, a simulated GPU) under Textual's
headless driver, waits for real measurements, then saves each screen: at 160x48, and at 80x24 (an SSH
window): the main screen, the same without a GPU (what this machine's GPU collector says, when it finds
none), and a short `lpxtop load` run against a simulated server once it is done. Run it again whenever the
interface changes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from lpxtop.cli.demo import start_demo
from lpxtop.ui.app import create_app

HERE = Path(__file__).resolve().parent

SIZE = (160, 48)
SMALL = (80, 24)


class WithoutGpu:
    """The demo's engine as a machine without a GPU sees it: its snapshots carry what this machine's GPU
    collector reports instead of the simulated GPU."""

    def __init__(self, engine, gpu) -> None:
        self._engine = engine
        self._gpu = gpu

    def snapshot(self):
        from dataclasses import replace

        return replace(self._engine.snapshot(), gpu=self._gpu)

    @property
    def capabilities(self):
        return self._engine.capabilities


async def wait_until(pilot, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.5)
    return False


async def select(pilot, app, name: str) -> None:
    """Put the endpoints table's cursor on endpoint `name`, by its row (the demo's endpoints change; key
    presses counted from the top would land on another)."""
    from lpxtop.ui.widgets.endpoints_table import EndpointsTable

    keys = app.screen.query_one(EndpointsTable).row_keys
    await pilot.press("home", *["down"] * keys.index(name))
    await pilot.pause(0.5)


async def shoot(out: Path) -> None:
    with start_demo(interval_s=0.5, gpu_surge_gib_s=4.0) as demo:
        engine = demo.engine
        app = create_app(engine, theme="lpxtop-dark", on_ready=engine.start, demo=demo.surge)
        async with app.run_test(size=SIZE) as pilot:
            endpoints = lambda: engine.snapshot().endpoints  # noqa: E731
            def ready(e) -> bool:
                chat = "chat" not in e.config.probes or e.probes_ok >= 20
                agent = e.agent is None or e.agent.steps_ok >= 10
                return chat and agent and e.server is not None and len(e.server_history) >= 8

            ok = await wait_until(pilot, lambda: bool(endpoints()) and all(ready(e) for e in endpoints()), 120)
            print("measured:", "every endpoint" if ok else "not every endpoint within 120 s")
            # vllm-sim-b runs chat probes and agent steps: the strip under the table has its sparklines
            await select(pilot, app, "vllm-sim-b")
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "main.svg"))
            await pilot.resize_terminal(*SMALL)
            await pilot.pause(1.5)
            app.save_screenshot(str(out / "main-80x24.svg"))
            await pilot.resize_terminal(*SIZE)
            await pilot.pause(1.0)
            await select(pilot, app, "vllm-sim-a")  # a chat endpoint: its charts
            await pilot.press("enter")
            await pilot.pause(1.5)
            from textual.widgets import TabbedContent

            app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-charts"
            await pilot.pause(1.5)
            app.save_screenshot(str(out / "detail.svg"))
            app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-server"
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "server.svg"))
            await pilot.press("escape")
            await select(pilot, app, "vllm-sim-b")  # chat probes and agent steps against a vLLM-like server
            await pilot.press("enter")
            await pilot.pause(1.0)
            app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-agent"
            await pilot.pause(1.5)
            app.save_screenshot(str(out / "agent.svg"))
            await pilot.press("escape")
            demo.surge(True)
            app.surge = True
            found = await wait_until(
                pilot, lambda: any(a.kind == "gpu_memory" for a in engine.snapshot().alerts), 60)
            await pilot.pause(1.0)
            app.save_screenshot(str(out / "alerts.svg"))
            print("alerts:", [a.message for a in engine.snapshot().alerts] if found else "none appeared")
        demo.surge(False)
        await shoot_without_gpu(demo, out)


async def shoot_without_gpu(demo, out: Path) -> None:
    from lpxtop.engine.gpu.collector import GpuCollector

    collector = GpuCollector()
    try:
        gpu = collector.collect()
    finally:
        collector.close()
    if gpu.devices:
        print("this machine has a GPU: nogpu-80x24.svg left as it is")
        return
    app = create_app(WithoutGpu(demo.engine, gpu), theme="lpxtop-dark", demo=demo.surge)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause(1.0)
        await select(pilot, app, "vllm-sim-b")
        await pilot.pause(1.5)
        app.save_screenshot(str(out / "nogpu-80x24.svg"))


async def shoot_load(out: Path) -> None:
    """A four-step concurrency sweep against a simulated server, shown at 80x24 once it is done."""
    from lpxtop.cli.load import build_load_engine
    from lpxtop.load.controller import LoadController
    from lpxtop.load.plan import LoadPlan
    from lpxtop.load.server_window import ServerWatch
    from lpxtop.load.slo import parse_slo
    from lpxtop.load.source import LoadSource
    from lpxtop.model.endpoint import EndpointConfig
    from lpxtop.sim.config import SimConfig
    from lpxtop.sim.thread import start_sim_in_thread

    with start_sim_in_thread(SimConfig(max_num_seqs=4, seed=3)) as sim:
        endpoint = EndpointConfig(name="sim", url=sim.url, metrics_interval_s=0.5)
        # The client-limit checks relaxed (--client-lag-limit 1000 --client-cpu-wait-limit 1), as the tests do
        # on a shared box: the picture shows the verdicts, and a busy build machine would mark every step
        # client-limited (lpxtop short of CPU) instead.
        plan = LoadPlan(endpoint=endpoint, mode="concurrency", levels=(1.0, 2.0, 4.0, 8.0), duration_s=4.0,
                        warmup_s=1.0, output_tokens=32, slo=parse_slo("ttft_p95<=300ms,error_rate<=1%"),
                        lag_limit_ms=1000.0, cpu_wait_limit=1.0)
        engine = build_load_engine(plan, ui=True, scrape=True)
        watch = ServerWatch(plan.endpoint.name, plan.endpoint.effective_metrics_url)
        engine.add_listener(watch.on_engine_event)
        controller = LoadController(plan, server_watch=watch)
        source = LoadSource(engine, controller, report_files=("sweep.json",))

        def start() -> None:
            engine.start()
            controller.start()

        app = create_app(source, theme="lpxtop-dark", refresh_s=0.5, on_ready=start)
        try:
            async with app.run_test(size=SMALL) as pilot:
                await wait_until(pilot, lambda: controller.state().finished, 120)
                await pilot.pause(1.5)
                app.save_screenshot(str(out / "load-80x24.svg"))
        finally:
            controller.stop()
            controller.wait(5.0)
            engine.stop()


SHOTS = ("main.svg", "detail.svg", "server.svg", "agent.svg", "alerts.svg", "main-80x24.svg", "nogpu-80x24.svg",
         "load-80x24.svg")


def main() -> int:
    asyncio.run(shoot(HERE))
    asyncio.run(shoot_load(HERE))
    for name in SHOTS:
        print("wrote", HERE / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
