"""Helpers shared by the sim's functional tests (no tests here): fixture paths and a raw SSE reader."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

_REPO = Path(__file__).resolve().parents[2]


def fixture_path(relative: str) -> Path:
    """A file under fixtures/ (sse/…, metrics/…): the repo's tests/fixtures, else the shared folder."""
    for base in (_REPO / "tests" / "fixtures", _REPO.parent / "shared" / "fixtures"):
        path = base / relative
        if path.exists():
            return path
    raise FileNotFoundError(f"fixture {relative} not found under tests/fixtures or ../shared/fixtures")


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


def wait_until(predicate, timeout_s: float = 5.0, interval_s: float = 0.01) -> bool:
    """Poll predicate until true or timeout (bounded by time); returns its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
