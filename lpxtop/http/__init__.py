"""lpxtop's own HTTP/1.1 client, written directly on asyncio, and the SSE parser of the streams it reads.

Probes, scrapes, discovery, the agent probe, the load generator, the fleet view's Prometheus queries and
the exporter's `/probe` all use `HttpClient` (OpenTelemetry export alone goes through the SDK's own
exporters). Outside this package, import only the names in `__all__`
(`from lpxtop.http import HttpClient, Timeout, ReadTimeout`); the modules behind them are its own.

**Why lpxtop keeps its own client** (measured side by side on a 2-core VM: one process per client, the
same SSE server, 200 sequential 16-token probes, keep-alive, three runs each):

| client | CPU per 16-token probe | CPU per read | stamp error p50 / p99 | import / RSS added |
|---|---|---|---|---|
| this one | 1.55–1.73 ms | 91–101 µs | 54–64 / 253–290 µs | 10 ms / 0 MB |
| aiohttp 3.14 `ClientSession` | 2.13–2.25 ms | 125–132 µs | 86–98 / 336–380 µs | 98 ms / +9.3 MB |
| httpx 0.28 `aiter_raw()` | 4.72–4.78 ms | 275–279 µs | 144–146 / 410–425 µs | 24 ms / +5.1 MB |
| bare `asyncio.Protocol` (floor) | 0.84–0.96 ms | 49–56 µs | 34–35 / 168–198 µs | — |

aiohttp would add ~9.3 MB of RSS and ~98 ms of start-up against targets of <= 60 MB (the dashboard is
at 57.6 MB after 10 minutes) and `once` <= 0.4 s, and its reads cost a third more, which the load
generator (concurrency 200 on 2 cores) feels too. The price of keeping this client: it must do what
users expect of an HTTP client, tested, and it is held to maintained libraries by differential tests:
its framing to h11 (tests/http/test_http_differential.py), its SSE parser to httpx-sse
(tests/http/test_sse_reference.py), its content decoding to zlib (tests/http/test_http_rules.py).

How it reads: an `asyncio.Protocol` collects what the socket gives; the task that reads a response
waits on one future (with one timer for its read timeout: no task per read, no cancel scope), and when
woken it takes the buffer and undoes the chunked framing with a few bytearray operations per chunk.
Every `data_received` is stamped with `time.perf_counter_ns()`: `Response.arrived_ns` is when the bytes
just handed over came off the socket, before any parsing or decoding.

What it does:

- GET/POST/HEAD (JSON bodies), an HTTP/1.1 keep-alive pool per origin with a bound on connections
  and an idle expiry; Content-Length / chunked / close-delimited bodies; 1xx interim answers skipped;
  https with `ssl.create_default_context()` (verification on);
- bounds on everything: each phase (pool wait, connect, write, each read) and, with `Timeout.total`,
  the whole request: connect, head and body, redirects included. `request()`/`get()`/`post()` always
  have a total (by default the longest of the phase timeouts): a server that answers 200 and then
  trickles a byte a second cannot hold them. The head of any response must come within the read
  timeout, however it is trickled. Heads, header counts, chunk-size lines and trailers are bounded,
  and so are bodies read whole;
- redirects (301/302/303 for GET and HEAD, 307/308 for any method, at most 5 hops, loops refused,
  credentials dropped when the origin changes): `redirects.py`. `Response.url` is the final URL;
- proxies from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY (loopback never proxied): `proxies.py`;
- `Content-Encoding: gzip` / `deflate` decoded incrementally within a size bound, although lpxtop asks
  for `identity`: `decoding.py`;
- a request on a reused keep-alive connection that the server had closed (no byte of an answer came)
  is sent once more on a new connection, POST included: nothing was processed;
- lpxtop's own delays stay out of the caller's timings: `Response.start_ns` is when the request that
  succeeded got its connection slot (after any wait for this client's own pool, before connecting),
  and `Response.pool_wait_ns` the time spent waiting for the pool;
- decoding is linear in the bytes received however they are chunked, and one event-loop step decodes
  at most `framing.LINES_PER_STEP` chunk lines (and `decoding.DECODE_STEP_BYTES` of inflated output):
  the rest waits until the reads that came meanwhile have been taken and stamped, and keeps the stamp
  of the read that brought it. One response's parsing then delays another endpoint's timestamps by
  part of a step at most (~0.15 ms of CPU): with a neighbour sending 2 MiB in one-byte chunks, the
  probe's TTFT error median went from 0.03 to 0.10 ms (before this: to 100 ms; benchmarks/http_cost.py);
- an incremental Server-Sent Events parser (`SseParser`) whose events carry the stamp of the read
  that completed them.

Not done: HTTP/2, cookies, https proxies (TLS to the proxy itself), authentication schemes.
Errors are `HttpError` subclasses (`errors.py`) raised `from` the OSError or ssl error underneath,
so lpxtop/engine/probe/errors.py finds refused/dns/tls in the exception chain.

The modules, along the seams aiohttp's client has:

- `client.py`: `HttpClient`: send, follow redirects, read the head, the one retry;
- `connection.py`: the protocol that stamps and buffers each read, and one connection with its timer;
- `connector.py`: opening connections (TCP, TLS, proxy tunnels) and the keep-alive pool;
- `request.py`: the URL taken apart and the request head;
- `response.py`: `Response`, the body handed over read by read, in bounded steps;
- `framing.py`: the response head and body framing (chunked, Content-Length, close), held to h11;
- `timeouts.py`: `Timeout`, a request's total budget, the connect deadline;
- `redirects.py`, `proxies.py`, `decoding.py`, `sse.py`, `errors.py`: as named.
"""

from __future__ import annotations

from lpxtop.http.client import HttpClient
from lpxtop.http.errors import (
    BodyTooLarge,
    ConnectError,
    ConnectTimeout,
    DecodingError,
    HttpError,
    HttpTimeout,
    InvalidURL,
    NetworkError,
    PoolTimeout,
    ProxyError,
    ReadError,
    ReadTimeout,
    RedirectError,
    RemoteProtocolError,
    UnsupportedProtocol,
    WriteError,
    WriteTimeout,
)
from lpxtop.http.proxies import is_loopback
from lpxtop.http.redirects import shown_url
from lpxtop.http.response import Response
from lpxtop.http.sse import BOM, SseEvent, SseParser
from lpxtop.http.timeouts import Timeout

__all__ = [
    # the client, what it returns, its limits
    "HttpClient",
    "Response",
    "Timeout",
    # errors: HttpError and its subclasses (errors.py)
    "BodyTooLarge",
    "ConnectError",
    "ConnectTimeout",
    "DecodingError",
    "HttpError",
    "HttpTimeout",
    "InvalidURL",
    "NetworkError",
    "PoolTimeout",
    "ProxyError",
    "ReadError",
    "ReadTimeout",
    "RedirectError",
    "RemoteProtocolError",
    "UnsupportedProtocol",
    "WriteError",
    "WriteTimeout",
    # Server-Sent Events: the parser, its events, the byte order mark a stream may begin with
    "BOM",
    "SseEvent",
    "SseParser",
    # URL helpers: a URL safe to show (no credentials, no query), and the hosts never sent to a proxy
    "is_loopback",
    "shown_url",
]
