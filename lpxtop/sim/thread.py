"""Running a SimServer on its own event loop in a daemon thread (for tests and `lpxtop demo`)."""

from __future__ import annotations

import contextlib
import time
from types import TracebackType

from lpxtop.loopthread import LoopThread
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


class SimThread:
    """One SimServer served on an event loop of its own, in a daemon thread (lpxtop/loopthread.py)."""

    def __init__(self, config: SimConfig | None = None, port: int = 0, host: str = "127.0.0.1") -> None:
        self.server = SimServer(config)
        self.port = 0
        self._host = host
        self._requested_port = port
        self._loop_thread = LoopThread("lpxtop-sim")

    def start_and_wait(self) -> SimHandle:
        """Start the thread and wait until the port is bound; raise what start-up raised (TimeoutError when
        it takes longer than 10 s)."""
        self._loop_thread.start(timeout=_START_TIMEOUT_S)
        try:
            self.port = self._loop_thread.run(self.server.start(self._host, self._requested_port), _START_TIMEOUT_S)
        except TimeoutError:
            self._loop_thread.stop(_STOP_TIMEOUT_S)
            raise TimeoutError(f"lpxtop sim did not start within {_START_TIMEOUT_S:.0f} s") from None
        except BaseException:
            self._loop_thread.stop(_STOP_TIMEOUT_S)
            raise
        return SimHandle(self)

    def stop(self) -> None:
        """Stop the server, then the loop, and join (bounded); safe to call twice."""
        began = time.monotonic()
        if self._loop_thread.loop is not None and not self._loop_thread.on_loop_thread():
            with contextlib.suppress(Exception):  # stopping: the loop shuts down whatever is left
                self._loop_thread.run(self.server.stop(), _STOP_TIMEOUT_S)
        self._loop_thread.stop(max(0.1, _STOP_TIMEOUT_S - (time.monotonic() - began)))


def start_sim_in_thread(config: SimConfig | None = None, port: int = 0, host: str = "127.0.0.1") -> SimHandle:
    """Start a SimServer in a daemon thread; returns once it listens. Use as `with ... as sim:`."""
    return SimThread(config, port=port, host=host).start_and_wait()
