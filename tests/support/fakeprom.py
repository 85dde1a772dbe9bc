"""A fake Prometheus on loopback for the fleet view's hostile-input tests: it answers each of the fleet's
instant queries (known by its exact PromQL, lpxtop/fleet/promql.py) with the series a test gives, or with
an error document, and keeps the headers it was sent. What it writes is what a compromised Prometheus,
or a proxy in front of one, could write."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from lpxtop.fleet.promql import FleetQueries

Labels = Mapping[str, str]


def vector(*series: tuple[Labels, str]) -> dict:
    """A successful instant answer: each (labels, value as Prometheus writes it, e.g. "1e308")."""
    return {"status": "success", "data": {"resultType": "vector",
                                          "result": [{"metric": dict(labels), "value": [1000.0, value]}
                                                     for labels, value in series]}}


def error(message: str, kind: str = "bad_data") -> dict:
    return {"status": "error", "errorType": kind, "error": message}


class _Server(ThreadingHTTPServer):
    # The fleet sends 8 queries at once, each on a new connection: with socketserver's backlog of 5 a
    # connection beyond it waits for the client's SYN to be sent again, a second later, every refresh.
    request_queue_size = 64


class FakePrometheus:
    """`answers`: query key (as in FleetQueries.instant()) -> a document (vector() or error()); any other
    query gets an empty vector. `url` is its base; `headers` the request headers it saw."""

    def __init__(self, answers: Mapping[str, dict], queries: FleetQueries | None = None) -> None:
        keys = {text: key for key, text in (queries or FleetQueries()).instant().items()}
        self.answers = dict(answers)
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                fake.headers.append(dict(self.headers.items()))
                promql = (parse_qs(urlsplit(self.path).query).get("query") or [""])[0]
                doc = fake.answers.get(keys.get(promql, ""), vector())
                body = json.dumps(doc).encode()
                self.send_response(200 if doc.get("status") == "success" else 400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> FakePrometheus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
