"""A real HTTP server for the scraper's tests (aiohttp.web on 127.0.0.1, one route per path) and the real
/metrics captures it serves."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from lpxtop.http import HttpClient
from lpxtop.model.endpoint import EndpointConfig
from tests.support.paths import FIXTURES

METRICS = FIXTURES / "metrics"



Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]



def capture(name: str) -> str:
    return (METRICS / name).read_text(encoding="utf-8")



@contextlib.asynccontextmanager
async def serve(routes: dict[str, Handler]) -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1 (ephemeral port) with the given GET routes; yields its origin."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()



@contextlib.asynccontextmanager
async def http_client() -> AsyncIterator[HttpClient]:
    async with HttpClient() as client:
        yield client



def text_handler(
    body: str, status: int = 200, hits: list[web.Request] | None = None, delay: float = 0.0
) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        if hits is not None:
            hits.append(request)
        if delay:
            await asyncio.sleep(delay)
        return web.Response(text=body, status=status, content_type="text/plain")

    return handle



def endpoint(origin: str, **kw: object) -> EndpointConfig:
    return EndpointConfig(name="test", url=origin + "/v1", **kw)  # type: ignore[arg-type]
