"""A small OTLP/HTTP receiver on loopback for the tests and benchmarks: it decodes what it is sent with the
reference protobuf classes (`opentelemetry-proto`) and can be told to refuse, to answer slowly, or to hang."""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(v: AnyValue):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attrs(key_values) -> dict:
    return {kv.key: value_of(kv.value) for kv in key_values}


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    content_type: str
    body: bytes
    at: float


@dataclass
class Receiver:
    """What arrived. `mode`: "ok", "refuse" (HTTP `status`), "slow" (answer after `delay_s`)."""

    mode: str = "ok"
    status: int = 400
    delay_s: float = 0.0
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def of(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def trace_requests(self) -> list[ExportTraceServiceRequest]:
        out = []
        for r in self.of("/v1/traces"):
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(r.body)
            out.append(msg)
        return out

    def metric_requests(self) -> list[ExportMetricsServiceRequest]:
        out = []
        for r in self.of("/v1/metrics"):
            msg = ExportMetricsServiceRequest()
            msg.ParseFromString(r.body)
            out.append(msg)
        return out

    def spans(self) -> list[tuple[dict, object, object]]:
        """(resource attributes, scope, span) of every span received."""
        out = []
        for req in self.trace_requests():
            for rs in req.resource_spans:
                resource = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append((resource, ss.scope, span))
        return out

    def metrics(self) -> dict[str, list[object]]:
        """The newest Metric message of each name (lpxtop's are cumulative: the last export holds them all)."""
        newest: dict[str, object] = {}
        for req in self.metric_requests():
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        newest[metric.name] = metric
        return newest  # type: ignore[return-value]


def start_receiver(**kw) -> Receiver:
    receiver = Receiver(**kw)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            with receiver.lock:
                receiver.requests.append(Received(self.path, {k.lower(): v for k, v in self.headers.items()},
                                                  self.headers.get("Content-Type", ""), body, time.time()))
            if receiver.mode == "slow":
                time.sleep(receiver.delay_s)
            if receiver.mode == "refuse":
                payload = b"refused by the test receiver"
                self.send_response(receiver.status)
                self.send_header("Content-Type", "text/plain")
            else:
                response = (ExportTraceServiceResponse() if self.path == "/v1/traces"
                            else ExportMetricsServiceResponse())
                payload = response.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except OSError:
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.server = server
    receiver.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    receiver.thread.start()
    return receiver


def stop_receiver(receiver: Receiver) -> None:
    if receiver.server is not None:
        receiver.server.shutdown()
        receiver.server.server_close()
