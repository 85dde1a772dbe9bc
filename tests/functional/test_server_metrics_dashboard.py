"""The dashboard on the real engine, scraping a /metrics page whose gauges are +Inf, -Inf and NaN.

A legal `+Inf` gauge once killed the dashboard (the queue sparkline divided by infinity). The
values are now unknown (`--`) with a note the Server tab shows; the app keeps running through several
scrapes and the detail screen.
"""

from __future__ import annotations

import json
import math
import time

from aiohttp import web
from textual.widgets import Static, TabbedContent

from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.engine.scrape.servers import ServerScraper
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.ui.app import create_app
from lpxtop.ui.widgets.endpoints_table import EndpointsTable
from tests.support.metrics_server import serve

PAGES = [
    "# TYPE vllm:num_requests_waiting gauge\n"
    f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
    "# TYPE vllm:num_requests_running gauge\n"
    f'vllm:num_requests_running{{model_name="m"}} {running}\n'
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
    for waiting, running, kv in [("+Inf", "2", "0.5"), ("3", "-Inf", "+Inf"), ("NaN", "1e999", "-0.5"), ("+Inf", "4", "0.25")]
]


async def test_dashboard_survives_infinite_gauges() -> None:
    served = [0]

    async def metrics(request: web.Request) -> web.Response:
        served[0] += 1
        return web.Response(text=PAGES[served[0] % len(PAGES)], content_type="text/plain")

    async with serve({"/metrics": metrics}) as origin:
        config = EndpointConfig(name="hostile", url=origin + "/v1", model="m", interval_s=5.0,
                                metrics_interval_s=0.2, timeout_s=2.0)
        engine = Engine([config], EngineSettings(), scraper_factory=lambda c: ServerScraper(c))
        app = create_app(engine, refresh_s=0.2, ssh=False, on_ready=engine.start)
        try:
            async with app.run_test(size=(120, 40)) as pilot:
                table = app.screen.query_one(EndpointsTable)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and served[0] < 6:
                    await pilot.pause(0.2)
                assert served[0] >= 6 and table.row_count == 1
                view = engine.snapshot().endpoints[0]
                assert view.server is not None and view.server.ok
                assert any("is +Inf" in note for note in view.server.notes) or any(
                    "is -Inf" in note for note in view.server.notes
                ), view.server.notes
                for point in view.server_history:
                    for value in (point.requests_waiting, point.requests_running, point.kv_cache_usage):
                        assert value is None or math.isfinite(value)
                json.dumps(engine.snapshot().to_json(), allow_nan=False)
                await pilot.press("enter")
                await pilot.pause(0.3)
                app.screen.query_one("#detail-tabs", TabbedContent).active = "tab-server"
                for _ in range(3):  # a few more scrapes with the detail screen up
                    await pilot.pause(0.3)
                text = str(app.screen.query_one("#server-latency", Static).content)
                assert "note: vllm:" in text and "shown as --" in text, text
        finally:
            engine.stop()
