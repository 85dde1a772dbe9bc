"""A small hostile HTTP server on loopback for tests: each route is a function the test writes.

Real sockets, the standard library only (a thread per connection), so a route may hang, trickle a
body a byte at a time, or answer anything at all.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


class HostileServer:
    """`routes` maps "GET /v1/models"-like keys to handlers; anything else is a 404."""

    def __init__(self, routes: dict[str, Route]) -> None:
        self.routes = routes
        self.stopping = threading.Event()
        self.hits: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _route(self) -> None:
                key = f"{self.command} {self.path.split('?')[0]}"
                outer.hits.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                route = outer.routes.get(key)
                if route is None:
                    send(self, 404, b'{"error": "not found"}')
                    return
                try:
                    route(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = _route  # noqa: N815 - the stdlib's names

            def log_message(self, *args) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()


def send(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes,
         content_type: str = "application/json", headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def models(*ids: str) -> Route:
    """GET /v1/models listing `ids`."""
    body = json.dumps({"object": "list", "data": [{"id": i, "object": "model"} for i in ids]}).encode()
    return lambda h: send(h, 200, body)


def stream(text: str = "Hi there", model: str = "m", usage: dict | None = None) -> Route:
    """A streaming chat completion: a role chunk, one chunk per word, finish, usage, [DONE]."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def event(obj: object) -> None:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model}
        event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        words = text.split(" ")
        for word in words:
            event({**base, "choices": [{"index": 0, "delta": {"content": word + " "}}]})
        event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        event({**base, "choices": [], "usage": usage or {"prompt_tokens": 5, "completion_tokens": len(words),
                                                           "total_tokens": 5 + len(words)}})
        event(b"[DONE]")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    return route


def trickle(body: bytes, every_s: float = 1.0, status: int = 200, stop: threading.Event | None = None) -> Route:
    """Answer `status` with a Content-Length, then send the body one byte every `every_s`."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.flush()
        for byte in body:
            if stop is not None and stop.is_set():
                return
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
            time.sleep(every_s)

    return route


def hang(seconds: float = 30.0, stop: threading.Event | None = None) -> Route:
    """Read the request, then answer nothing for `seconds` (or until `stop`)."""

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        (stop or threading.Event()).wait(seconds)

    return route
