"""The exporter's HTTP server: `/metrics`, `/probe?target=`, and a landing page at `/`.

The standard library's threading HTTP server, bounded:

- a connection waits for its request in the header gate (`HeaderGate`: one thread and a selector for
  every connection), not in a serving thread: it gets a thread and one of the `MAX_CONNECTIONS` serving
  slots (more get 503 at once) only when its request line and headers are all in. The gate gives each
  connection `HEADER_DEADLINE_S` in all to send them (a whole-request deadline: a client that sends a
  byte every few seconds is cut all the same), holds at most `MAX_WAITING` connections (beyond, the one
  that has waited longest is dropped) and `MAX_HEADER_BYTES` of each. So slow clients (a slow-loris)
  cost a descriptor each, never a slot, and Prometheus' scrape, whose request comes in one packet, is
  served at once however many of them hang around;
- the serving thread's idle tick (every `TICK_S`) folds queued probe results into the histograms when
  nobody has scraped for a while.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import io
import logging
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from lpxtop.export.exporter import Exporter

log = logging.getLogger("lpxtop.export")

MAX_CONNECTIONS = 16
REQUEST_TIMEOUT_S = 10.0  # each read and write once a request is being served
HEADER_DEADLINE_S = 10.0  # the request line and every header, in all, from the connection's accept
MAX_WAITING = 256
MAX_HEADER_BYTES = 64 * 1024
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


class _Replay(io.RawIOBase):
    """The bytes the gate read for a request, then the socket's."""

    def __init__(self, early: bytes, sock: socket.socket) -> None:
        self._early = memoryview(early)
        self._raw = sock.makefile("rb", buffering=0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._raw.close()
        super().close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int | None:  # type: ignore[no-untyped-def, override]
        if self._early:
            n = min(len(buffer), len(self._early))
            buffer[:n] = self._early[:n]
            self._early = self._early[n:]
            return n
        return self._raw.readinto(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: ExporterHttpServer
    timeout = REQUEST_TIMEOUT_S  # each read and write while serving; the header gate bounded the request
    server_version = "lpxtop-exporter"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_Replay(self.server.early_bytes(self.request), self.request))

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
        if log.isEnabledFor(logging.DEBUG):
            from lpxtop.export.probe import request_secrets
            from lpxtop.textsafe import printable, redact

            text = printable(format % args)
            log.debug("%s %s", self.address_string(), redact(text, also=request_secrets(getattr(self, "path", ""))))


class _Waiting:
    __slots__ = ("address", "data", "deadline")

    def __init__(self, address: object, deadline: float) -> None:
        self.address = address
        self.data = bytearray()
        self.deadline = deadline


class HeaderGate:
    """Holds accepted connections until their request's headers are in, on one thread, then hands each
    to `dispatch(sock, address, early_bytes)`. Bounded in time (`HEADER_DEADLINE_S` each, in all), in
    number (`MAX_WAITING`, the longest-waiting dropped first) and in bytes (`MAX_HEADER_BYTES`)."""

    def __init__(self, dispatch) -> None:  # type: ignore[no-untyped-def]
        self._dispatch = dispatch
        self._selector = selectors.DefaultSelector()
        self._waiting: collections.OrderedDict[socket.socket, _Waiting] = collections.OrderedDict()
        self._incoming: collections.deque[tuple[socket.socket, object]] = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._stopping = False
        self.dropped = 0  # connections cut by the deadline or the cap (for tests and logs)
        self._thread = threading.Thread(target=self._run, name="lpxtop-exporter-gate", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket, address: object) -> None:
        """From the accepting thread: wait for this connection's request."""
        self._incoming.append((sock, address))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def close(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._thread.join(2)
        for sock in list(self._waiting):
            self._drop(sock, count=False)
        while self._incoming:
            _close(self._incoming.popleft()[0])
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            timeout = TICK_S
            if self._waiting:
                first = next(iter(self._waiting.values()))
                timeout = max(0.0, min(timeout, first.deadline - now))
            try:
                events = self._selector.select(timeout)
            except OSError:  # pragma: no cover - a closed selector while stopping
                return
            for key, _ in events:
                sock = key.fileobj
                if sock is self._wake_r:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                self._read(sock)  # type: ignore[arg-type]
            self._take_incoming()
            self._expire(time.monotonic())

    def _take_incoming(self) -> None:
        while self._incoming:
            sock, address = self._incoming.popleft()
            while len(self._waiting) >= MAX_WAITING:  # the one that has waited longest makes room
                self._drop(next(iter(self._waiting)))
            try:
                sock.setblocking(False)
                self._selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                _close(sock)
                continue
            self._waiting[sock] = _Waiting(address, time.monotonic() + HEADER_DEADLINE_S)

    def _read(self, sock: socket.socket) -> None:
        waiting = self._waiting.get(sock)
        if waiting is None:
            return
        try:
            chunk = sock.recv(MAX_HEADER_BYTES + 1 - len(waiting.data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away before its request was in
            self._drop(sock, count=False)
            return
        waiting.data += chunk
        data = waiting.data
        if b"\r\n\r\n" in data or b"\n\n" in data or len(data) > MAX_HEADER_BYTES:
            # in (or too long: the handler answers 431/414 as the standard library does)
            self._selector.unregister(sock)
            del self._waiting[sock]
            try:
                sock.setblocking(True)
                self._dispatch(sock, waiting.address, bytes(data))
            except Exception:  # noqa: BLE001 - one connection must not stop the gate
                log.debug("exporter: dispatching a request failed", exc_info=True)
                _close(sock)

    def _expire(self, now: float) -> None:
        while self._waiting:
            sock, waiting = next(iter(self._waiting.items()))
            if waiting.deadline > now:
                return
            with contextlib.suppress(OSError):
                sock.send(b"HTTP/1.0 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
            self._drop(sock)

    def _drop(self, sock: socket.socket, count: bool = True) -> None:
        self._waiting.pop(sock, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)
        _close(sock)
        if count:
            self.dropped += 1


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class ExporterHttpServer(ThreadingHTTPServer):
    """A connection waits in the header gate, then gets a thread: at most MAX_CONNECTIONS at once."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, host: str, port: int, exporter: Exporter) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.exporter = exporter
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._early: dict[socket.socket, bytes] = {}
        self.gate: HeaderGate | None = None
        super().__init__((host, port), _Handler)  # binds (OSError when it cannot)
        self.gate = HeaderGate(self._serve)

    def service_actions(self) -> None:
        self.exporter.tick()

    def process_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        assert self.gate is not None
        self.gate.add(request, client_address)  # served once its request is in (HeaderGate)

    def _serve(self, request: socket.socket, client_address: object, early: bytes) -> None:
        """From the gate: the request's headers are in; serve it on a thread of its own if a slot is free."""
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
                                b"Content-Length: 33\r\n\r\ntoo many requests at once; retry\n")
            self.shutdown_request(request)
            return
        self._early[request] = early
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._early.pop(request, None)
            self._slots.release()
            raise

    def early_bytes(self, request: socket.socket) -> bytes:
        """What the gate read of this request (the handler reads it first)."""
        return self._early.pop(request, b"")

    def process_request_thread(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._early.pop(request, None)
            self._slots.release()

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        log.debug("exporter connection from %s failed", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        if self.gate is not None:
            self.gate.close()
