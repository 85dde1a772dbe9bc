"""The receiver's settings and bounds, apart from its server (importing this module imports no aiohttp)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4318  # OTLP/HTTP's own default port
MAX_BODY_BYTES = 4 * 1024 * 1024  # vLLM's batches (512 spans at most) are ~200 KB
# json.loads holds the interpreter lock for the whole body (94 ms for 850 KB here, under a load average
# of 12): JSON bodies stay small (no server lpxtop reads sends JSON; tools and tests may)
MAX_JSON_BODY_BYTES = 256 * 1024
MAX_CONCURRENT = 4
SPANS_PER_S = 5000.0
READ_TIMEOUT_S = 10.0
DEFAULT_WAIT_S = 30.0  # how long a request waits for its span, and a span for its request


@dataclass(frozen=True)
class ReceiverSettings:
    """Where the receiver listens and its bounds."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    forward_url: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    max_concurrent: int = MAX_CONCURRENT
    spans_per_s: float = SPANS_PER_S
    read_timeout_s: float = READ_TIMEOUT_S
