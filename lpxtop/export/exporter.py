"""`Exporter`: the engine's measurements served to Prometheus, beside the engine (never inside its loop)."""

from __future__ import annotations

import contextlib
import html
import logging
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import choose_encoder

from lpxtop import __version__
from lpxtop.export.collector import LpxtopCollector
from lpxtop.export.probe import (
    ProbeRefused,
    ProbeRunner,
    budget_from_header,
    probe_families,
    render,
    resolve_target,
)
from lpxtop.export.server import LANDING, TICK_S, ExporterHttpServer
from lpxtop.export.settings import ExporterSettings
from lpxtop.export.state import DRAIN_AT, ExportState
from lpxtop.model.snapshot import Snapshot

if TYPE_CHECKING:
    from lpxtop.model.events import EngineEvent

log = logging.getLogger("lpxtop.export")


class ListenedSource(Protocol):
    """What the exporter needs of the engine: its newest snapshot, and every probe as it finishes."""

    def snapshot(self) -> Snapshot: ...

    def add_listener(self, listener: Callable[[EngineEvent], None]) -> None: ...


class Exporter:
    """Serves `/metrics` and `/probe` for `engine`. Create it before `engine.start()` (so the listener
    sees every probe), then `start()`; `stop()` is bounded."""

    def __init__(self, engine: ListenedSource, settings: ExporterSettings | None = None) -> None:
        self.settings = settings or ExporterSettings()
        self.engine = engine
        self.state = ExportState(self.settings.buckets)
        self.collector = LpxtopCollector(self.state, engine.snapshot, self.settings.host_label)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        # process_cpu_seconds_total & co.: what the exporter (and the engine in the same process) cost
        ProcessCollector(registry=self.registry)
        engine.add_listener(self.state.listener)
        self.probes = ProbeRunner(self.settings.max_concurrent_probes)
        self._server: ExporterHttpServer | None = None
        self._thread: threading.Thread | None = None

    # ---- life ----

    def start(self) -> None:
        """Bind and serve in a background thread. OSError (port taken, address not here) is raised as is."""
        if self._server is not None:
            return
        self._server = ExporterHttpServer(self.settings.listen_host, self.settings.listen_port, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": TICK_S},
                                        name="lpxtop-exporter", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            # shutdown() waits for the serving loop to notice, up to one poll interval: a connection of
            # our own wakes the loop at once (repeated, in case it came before the loop saw the request)
            stopper = threading.Thread(target=server.shutdown, daemon=True)
            stopper.start()
            for _ in range(int(TICK_S * 3 / 0.05)):
                with contextlib.suppress(OSError), socket.create_connection(self._wake_address(server), timeout=0.2):
                    pass
                stopper.join(0.05)
                if not stopper.is_alive():
                    break
            server.server_close()
        if thread is not None:
            thread.join(TICK_S * 3)
        self.probes.close()

    def __enter__(self) -> Exporter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def _wake_address(server: ExporterHttpServer) -> tuple[str, int]:
        host, port = server.server_address[:2]
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return str(host), int(port)

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) bound, once started (port 0 in the settings picks a free one)."""
        if self._server is None:
            return self.settings.listen_host, self.settings.listen_port
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    # ---- what the HTTP server asks ----

    def tick(self) -> None:
        """The server's idle tick: fold the queue in when it fills up between scrapes."""
        if self.state.pending >= DRAIN_AT:
            with self.state.lock:
                self.state.drain()

    def metrics(self, accept: str) -> tuple[bytes, str]:
        """The exposition for an `Accept` header: Prometheus text, or OpenMetrics when asked for."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def probe(self, query: Mapping[str, Sequence[str]], timeout_header: str | None) -> tuple[int, bytes, str]:
        """Answer `/probe?target=URL[&model=M]` within the announced scrape timeout."""
        plain = "text/plain; charset=utf-8"
        if not self.settings.probe_enabled:
            return 404, b"/probe is turned off on this exporter ([exporter] probe = false)\n", plain
        target = (query.get("target") or [None])[0]
        model = (query.get("model") or [None])[0]
        try:
            config = resolve_target(target, model, [v.config for v in self.engine.snapshot().endpoints])
            budget = budget_from_header(timeout_header, self.settings.probe_timeout_s)
            sample, took = self.probes.probe(config, budget)
        except ProbeRefused as exc:
            return exc.status, f"{exc}\n".encode(), plain
        encoder, content_type = choose_encoder("")
        return 200, render(probe_families(sample, took, budget), encoder), content_type

    def landing(self) -> str:
        snap = self.engine.snapshot()
        probe = ('<a href="/probe?target=http://127.0.0.1:8000/v1">/probe?target=URL&amp;model=M</a>: one probe '
                 "per scrape (it makes this host send requests: keep the exporter on a trusted network)"
                 if self.settings.probe_enabled else "/probe is turned off")
        return LANDING.format(version=__version__, host=html.escape(self.settings.host_label),
                              count=len(snap.endpoints), probe=probe)
