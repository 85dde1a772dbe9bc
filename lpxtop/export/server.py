"""The exporter's HTTP server: `/metrics`, `/probe?target=`, and a landing page at `/`.

The standard library's threading HTTP server, bounded: at most `MAX_CONNECTIONS` requests are served
at once (more get 503 at once), a client has `REQUEST_TIMEOUT_S` to send its request, and the
serving thread's idle tick (every `TICK_S`) folds queued probe results into the histograms when
nobody has scraped for a while.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from lpxtop.export.exporter import Exporter

log = logging.getLogger("lpxtop.export")

MAX_CONNECTIONS = 16
REQUEST_TIMEOUT_S = 10.0
TICK_S = 0.5  # also how long stop() may wait for the serving loop to notice
GZIP_MIN_BYTES = 1024

LANDING = """<!doctype html><html><head><title>lpxtop exporter</title></head><body>
<h1>lpxtop exporter</h1>
<p>lpxtop {version} on {host}, probing {count} endpoint(s).</p>
<ul><li><a href="/metrics">/metrics</a>: the engine's measurements (Prometheus text; OpenMetrics on request)</li>
<li>{probe}</li></ul>
<p>Scrape configs, rules and the queries of <code>lpxtop fleet</code>: docs/prometheus in lpxtop's sources.</p>
</body></html>
"""


class _Handler(BaseHTTPRequestHandler):
    server: ExporterHttpServer
    timeout = REQUEST_TIMEOUT_S  # for reading the request; a silent client is dropped
    server_version = "lpxtop-exporter"

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        exporter = self.server.exporter
        parts = urlsplit(self.path)
        try:
            if parts.path == "/metrics":
                body, content_type = exporter.metrics(self.headers.get("Accept", ""))
                self._answer(200, body, content_type)
            elif parts.path == "/probe":
                status, body, content_type = exporter.probe(
                    parse_qs(parts.query), self.headers.get("X-Prometheus-Scrape-Timeout-Seconds"))
                self._answer(status, body, content_type)
            elif parts.path in ("/", "/index.html"):
                self._answer(200, exporter.landing().encode(), "text/html; charset=utf-8")
            else:
                self._answer(404, b"not found: try /metrics or /probe?target=URL\n", "text/plain; charset=utf-8")
        except Exception:  # noqa: BLE001 - one bad request must not stop the exporter
            log.exception("exporter request %s failed", parts.path)
            with contextlib.suppress(OSError):
                self._answer(500, b"internal error: see the exporter's log\n", "text/plain; charset=utf-8")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        encoding = self.headers.get("Accept-Encoding", "")
        zipped = len(body) >= GZIP_MIN_BYTES and "gzip" in encoding
        if zipped:
            body = gzip.compress(body, compresslevel=5)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if zipped:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the standard library's name
        log.debug("%s %s", self.address_string(), format % args)


class ExporterHttpServer(ThreadingHTTPServer):
    """A thread per request, at most MAX_CONNECTIONS at once."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 32

    def __init__(self, host: str, port: int, exporter: Exporter) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.exporter = exporter
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((host, port), _Handler)

    def service_actions(self) -> None:
        self.exporter.tick()

    def process_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                                b"Content-Length: 33\r\n\r\ntoo many requests at once; retry\n")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        log.debug("exporter connection from %s failed", client_address, exc_info=True)
