"""Helpers for tests that run the simulated server on loopback: an endpoint for it, the probe's error against
the sim's own record, and a raw SSE reader that stamps each read (the sim's functional tests)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample, quantile_sorted
from lpxtop.sim.records import token_times_ns
from tests.support.paths import FIXTURES


def endpoint(url: str, **kw) -> EndpointConfig:
    values = {"name": "sim", "url": url, "max_tokens": 16, "timeout_s": 10.0, "first_token_timeout_s": 5.0,
              "connect_timeout_s": 2.0}
    values.update(kw)
    return EndpointConfig(**values)


def fidelity_errors(samples: list[Sample], server) -> tuple[list[float], list[float]]:
    """Measured minus true TTFT and ITL (ms), matching each sample to the sim's record by response id."""
    ttft_err: list[float] = []
    itl_err: list[float] = []
    for s in samples:
        record = server.record_for(s.response_id)
        assert record is not None, f"no record for {s.response_id}"
        truth = token_times_ns(record.events)
        assert len(truth) == len(s.token_event_ms), (len(truth), len(s.token_event_ms))
        ttft_err.append(s.ttft_ms - (truth[0] - s.start_ns) / 1e6)
        true_gaps = [(b - a) / 1e6 for a, b in zip(truth, truth[1:])]
        itl_err += [m - t for m, t in zip(s.itl_ms, true_gaps)]
    return ttft_err, itl_err


def p(values: list[float], q: float) -> float:
    return quantile_sorted(sorted(values), q)


def fixture_path(relative: str) -> Path:
    """A file under tests/fixtures (sse/…, metrics/…)."""
    path = FIXTURES / relative
    if not path.exists():
        raise FileNotFoundError(f"fixture {relative} not found under {FIXTURES}")
    return path


def fixture_events(relative: str) -> list[str]:
    """The `data:` payloads of a captured SSE body, in order."""
    text = fixture_path(relative).read_text(encoding="utf-8")
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


@dataclass
class StreamResult:
    """What a client saw of one streamed response."""

    status: int
    headers: httpx.Headers
    t_start_ns: int
    events: list[tuple[int, str]] = field(default_factory=list)  # (receive perf_counter_ns, payload)
    raw: bytes = b""
    error: str | None = None

    def json_events(self) -> list[dict[str, Any]]:
        """The events that are JSON objects (not [DONE], not malformed)."""
        out = []
        for _, data in self.events:
            try:
                out.append(json.loads(data))
            except json.JSONDecodeError:
                pass
        return out

    @property
    def response_id(self) -> str:
        return self.headers["x-sim-response-id"]


def stream(
    client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> StreamResult:
    """POST and read the body as raw bytes, timestamping each read before parsing (like lpxtop's probe)."""
    t_start = time.perf_counter_ns()
    buffer = b""
    with client.stream("POST", url, json=body, headers=headers) as response:
        result = StreamResult(status=response.status_code, headers=response.headers, t_start_ns=t_start)
        try:
            for chunk in response.iter_raw():
                t_recv = time.perf_counter_ns()
                result.raw += chunk
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    line = event.decode()
                    if line.startswith("data: "):
                        result.events.append((t_recv, line[len("data: ") :]))
        except httpx.HTTPError as exc:
            result.error = type(exc).__name__
    return result


def chat_body(max_tokens: int = 8, stream: bool = True, usage: bool = True, **extra: Any) -> dict[str, Any]:
    """A chat request body for the sim's default test model."""
    body: dict[str, Any] = {
        "model": "sim-test",
        "messages": [{"role": "user", "content": "Say something about inference servers."}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body
