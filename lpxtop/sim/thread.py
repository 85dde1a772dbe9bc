"""Running a SimServer on its own event loop in a daemon thread (for tests and `lpxtop demo`)."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType

from lpxtop.sim.config import SimConfig
from lpxtop.sim.server import SimServer

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0


class SimHandle:
    """A running sim: where it listens, the server object, and stop()."""

    def __init__(self, thread: SimThread) -> None:
        self._thread = thread

    @property
    def server(self) -> SimServer:
        """The SimServer (set_faults, records, record_for and state properties are thread-safe)."""
        return self._thread.server

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return self._thread.port

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT` (for /metrics, /health, /sim/...)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, the OpenAI base URL."""
        return f"{self.base_url}/v1"

    def stop(self) -> None:
        """Stop the server and join its thread (bounded)."""
        self._thread.stop()

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class SimThread(threading.Thread):
    """A daemon thread that owns an event loop serving one SimServer."""

    def __init__(self, config: SimConfig | None = None, port: int = 0, host: str = "127.0.0.1") -> None:
        super().__init__(name="lpxtop-sim", daemon=True)
        self.server = SimServer(config)
        self.port = 0
        self._host = host
        self._requested_port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._stopped: asyncio.Event | None = None

    def run(self) -> None:
        """Thread body: serve until stop()."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        try:
            self.port = await self.server.start(self._host, self._requested_port)
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await self.server.stop()

    def start_and_wait(self) -> SimHandle:
        """Start the thread and wait until the port is bound; raise what start-up raised."""
        self.start()
        if not self._ready.wait(_START_TIMEOUT_S):
            self.stop()
            raise TimeoutError(f"lpxtop sim did not start within {_START_TIMEOUT_S:.0f} s")
        if self._error is not None:
            self.join(_STOP_TIMEOUT_S)
            raise self._error
        return SimHandle(self)

    def stop(self) -> None:
        """Ask the loop to stop the server, then join (bounded); safe to call twice."""
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:
                pass  # the loop closed in between
        if self.is_alive() and threading.current_thread() is not self:
            self.join(_STOP_TIMEOUT_S)


def start_sim_in_thread(config: SimConfig | None = None, port: int = 0, host: str = "127.0.0.1") -> SimHandle:
    """Start a SimServer in a daemon thread; returns once it listens. Use as `with ... as sim:`."""
    return SimThread(config, port=port, host=host).start_and_wait()
