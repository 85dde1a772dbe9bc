"""Server-side metrics for one endpoint: fetch /metrics (or Ollama's /api/ps), detect the kind,
normalize through metric_names' tables into ServerMetrics. Never raises: failures become `status`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from lpxtop.engine.scrape.exposition import Exposition, NotPrometheusText, short_reason
from lpxtop.engine.scrape.kinds import detect_kind, probe_kind
from lpxtop.engine.scrape.metric_names import BY_KIND, KindNames, family_names, histogram_names, sample_name
from lpxtop.engine.scrape.ollama import looks_like_ps, ollama_metrics
from lpxtop.engine.scrape.reparse import ReParser
from lpxtop.engine.scrape.tracker import MetricsTracker
from lpxtop.http import (
    BodyTooLarge,
    ConnectError,
    HttpClient,
    HttpError,
    HttpTimeout,
)
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.server import ServerMetrics

METRICS_TIMEOUT_S = 3.0
MAX_METRICS_BYTES = 8 * 1024 * 1024  # a vLLM scrape is ~55 KB; anything near this is not a metrics page
MAX_ERROR_BYTES = 4096
REQUEST_HEADERS = {
    "Accept-Encoding": "identity",
    # Ask for the classic text format: prometheus_client may answer OpenMetrics to a bare Accept.
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
}
NO_METRICS_STATUSES = (401, 403, 404, 405, 501)
MAX_PAGE_NAMES = 20_000  # distinct names looked at to tell the kind (a vLLM page has ~150)


@dataclasses.dataclass(frozen=True)
class _Answer:
    status_code: int
    content_type: str
    body: bytes


class PageNames:
    """The metric names on a page, read from the start of each sample line (no parsing): enough for
    detect_kind, which looks only at name prefixes."""

    def __init__(self, text: str) -> None:
        names: set[str] = set()
        for line in text.split("\n"):
            line = line.strip()
            if line and line[0] != "#":
                names.add(sample_name(line))
                if len(names) >= MAX_PAGE_NAMES:
                    break
        self.names = names


class ServerScraper:
    """Scrapes one endpoint's server metrics; keeps the state that rates and window quantiles need.

    Single-flight: a call made while a scrape is in progress waits for that scrape's result
    instead of starting a second request. Servers that have no /metrics (404, 501...) are asked
    again only every `recheck_s`; the cached answer is returned in between.
    """

    def __init__(
        self,
        endpoint: EndpointConfig,
        window_s: float = 300.0,
        *,
        timeout_s: float = METRICS_TIMEOUT_S,
        recheck_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        perf_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.endpoint = endpoint
        self.window_s = window_s
        self.timeout_s = timeout_s
        self.recheck_s = recheck_s
        self._clock = clock
        self._wall = wall_clock
        self._perf_ns = perf_ns  # the probes' clock: places each histogram read among the probes
        self.tracker = MetricsTracker(window_s)
        forced = (endpoint.server_kind or "").lower() or None
        self._forced = forced if forced in BY_KIND or forced in ("ollama", "openai") else None
        self._ollama: bool | None = True if self._forced == "ollama" else None  # None: not yet known
        self._names: KindNames | None = BY_KIND.get(self._forced or "")
        self._last: ServerMetrics | None = None
        self._asked_kind: str | None = None  # what the server said it is when it had no /metrics
        self._asked = False
        self._skip_until = 0.0
        self._inflight: asyncio.Future[ServerMetrics] | None = None
        self._reparser: ReParser | None = None  # parses the known kind's families, page after page
        self._force_histograms = False  # this scrape reads the histograms whatever the schedule

    @property
    def last(self) -> ServerMetrics | None:
        """The most recent result, or None before the first scrape."""
        return self._last

    @property
    def kind(self) -> str:
        """The kind known so far (forced, detected, or "unknown")."""
        if self._ollama:
            return "ollama"
        if self._names is not None:
            return self._names.kind
        return self._forced or self._asked_kind or "unknown"

    def cancel(self) -> None:
        """Cancel the scrape in progress, if any (engine shutdown)."""
        if self._inflight is not None and not self._inflight.done():
            self._inflight.cancel()

    async def scrape(self, client: HttpClient, *, histograms: bool = False) -> ServerMetrics:
        """One bounded scrape (about `timeout_s` at most); never raises.

        `histograms=True` reads the latency histograms whatever the schedule (HISTOGRAMS_EVERY_S): for a
        last scrape whose window must cover every probe before it (`lpxtop once`).
        """
        if histograms and self._inflight is not None and not self._inflight.done():
            await asyncio.shield(self._inflight)  # that one may leave them out: then one that reads them
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.ensure_future(self._scrape_once(client, histograms))
        # shield: a cancelled caller must not cancel the scrape another caller is waiting on.
        return await asyncio.shield(self._inflight)

    async def _scrape_once(self, client: HttpClient, histograms: bool = False) -> ServerMetrics:
        self._force_histograms = histograms
        try:
            result = await self._scrape(client)
        except Exception as e:  # a bug here must not take the engine down
            result = self._failed(f"error: scraper failed ({type(e).__name__}: {e})"[:200])
        self._last = result
        return result

    async def _scrape(self, client: HttpClient) -> ServerMetrics:
        if self._forced == "openai":
            return self._failed("no /metrics: server_kind is openai (hosted APIs expose none)")
        if self._ollama:
            return await self._scrape_ollama(client)
        if self._last is not None and self._clock() < self._skip_until:
            return self._last
        url = self.endpoint.effective_metrics_url
        started = self._clock()
        asked_ns = self._perf_ns()
        answer = await self._get(client, url, MAX_METRICS_BYTES, "/metrics")
        if isinstance(answer, ServerMetrics):
            return answer
        answered_ns = self._perf_ns()
        now, wall = self._clock(), self._wall()
        if answer.status_code == 200:
            # Parsing a vLLM page takes ~20 ms of pure Python: off the event loop, so the probes'
            # byte-arrival timestamps on that loop are not held up by it.
            return await asyncio.to_thread(
                self._parse, answer, (now - started) * 1000.0, now, wall, (asked_ns, answered_ns)
            )
        if answer.status_code == 404 and self._ollama is None:
            self._ollama = await self._is_ollama(client)
            if self._ollama:
                return await self._scrape_ollama(client)
        if answer.status_code in NO_METRICS_STATUSES:
            self._skip_until = self._clock() + self.recheck_s
            if not self._asked and self._names is None and self._forced is None:
                # No metrics to tell the kind: ask the server itself once (/v1/models owned_by, /info, /props).
                self._asked = True
                self._asked_kind = await probe_kind(client, self.endpoint)
        return self._http_status(answer)

    def _parse(
        self, answer: _Answer, scrape_ms: float, now: float, wall: float, stamps: tuple[int, int] | None = None
    ) -> ServerMetrics:
        """Read one page: only the lines of the families the server's kind has (metric_names), as
        prometheus_client reads them, on the first scrape as on every later one.

        The kind comes from the names on the page (or the config); a page that names no known server is
        parsed whole only to say what it is. Lines of other families are not read: a line there that
        prometheus_client would refuse does not blind lpxtop to the queue (Prometheus would drop the
        whole scrape), and the first scrape reads a page exactly as the later ones do.
        """
        text = answer.body.decode("utf-8", errors="replace")
        asked_ns, answered_ns = stamps if stamps is not None else (None, None)
        if self._names is not None:
            # The kind is known: parse its families, only the lines that changed since the last scrape.
            # A page without them (another server took the port) goes on to a fresh detection.
            histograms = self._force_histograms or self.tracker.wants_histograms(now)
            try:
                expo = self._reparser_for(self._names).parse(text, histograms=histograms)
            except NotPrometheusText:
                expo = None
            if expo is not None and expo.families and (self._forced or detect_kind(expo) is self._names):
                metrics = self.tracker.update(expo, self._names, now, wall, histograms=histograms,
                                              asked_ns=asked_ns, answered_ns=answered_ns)
                return dataclasses.replace(metrics, scrape_ms=scrape_ms)
        names = BY_KIND.get(self._forced or "") or detect_kind(PageNames(text))
        if names is None:
            return self._not_a_known_server(answer, text)
        if self._names is not None and names.kind != self._names.kind:
            self.tracker.reset_history()  # another server now answers on this port
        self._names = names
        histograms = True  # a first scrape, a new kind, or a page the lean parse found nothing on
        try:
            expo = self._reparser_for(names).parse(text, histograms=histograms)
        except NotPrometheusText as e:
            return self._not_prometheus_text(answer, str(e))
        if expo.families == 0:
            return self._failed("error: /metrics answered a page without the metrics of " + names.kind)
        metrics = self.tracker.update(expo, names, now, wall, histograms=histograms,
                                      asked_ns=asked_ns, answered_ns=answered_ns)
        return dataclasses.replace(metrics, scrape_ms=scrape_ms)

    def _reparser_for(self, names: KindNames) -> ReParser:
        families = family_names(names)
        if self._reparser is None or self._reparser.families is not families:
            self._reparser = ReParser(families, histogram_names(names))
        return self._reparser

    def _not_a_known_server(self, answer: _Answer, text: str) -> ServerMetrics:
        """The status of a page with no known server's metrics: not metrics at all, empty, or another server."""
        try:
            expo = Exposition.parse(text)
        except NotPrometheusText as e:
            return self._not_prometheus_text(answer, str(e))
        if expo.families == 0:
            return self._failed("error: /metrics answered an empty page")
        sample = next(iter(sorted(expo.names)), "")
        return self._failed(
            f"unknown server: /metrics has no vLLM, SGLang, TGI, llama.cpp, Triton or LMDeploy "
            f"metrics ({expo.families} families, e.g. {sample})"[:200],
            kind="unknown",
        )

    def _not_prometheus_text(self, answer: _Answer, reason: str) -> ServerMetrics:
        ctype = answer.content_type.split(";")[0].strip()
        detail = f"{ctype}: {reason}" if ctype and "text/plain" not in ctype else reason
        return self._failed(f"error: /metrics is not Prometheus text ({detail})")

    def _http_status(self, answer: _Answer) -> ServerMetrics:
        code = answer.status_code
        body = answer.body.decode("utf-8", errors="replace").lower()
        if code == 501 and ("does not support metrics" in body or "not_supported" in body):
            return self._failed(
                "no /metrics: llama.cpp answers 501 — start llama-server with --metrics", kind="llamacpp"
            )
        if code == 404:
            return self._failed(
                "no /metrics: HTTP 404 — this server has none (hosted APIs, Triton's OpenAI port); "
                "set metrics_url if it lives elsewhere (Triton: port 8002)"
            )
        if code in (401, 403):
            return self._failed(f"no /metrics: HTTP {code} — the metrics page wants credentials")
        if code in NO_METRICS_STATUSES:
            return self._failed(f"no /metrics: HTTP {code}")
        return self._failed(f"error: /metrics answered HTTP {code}")

    async def _is_ollama(self, client: HttpClient) -> bool:
        answer = await self._get(client, self.endpoint.origin + "/api/ps", 1024 * 1024, "/api/ps")
        if isinstance(answer, ServerMetrics) or answer.status_code != 200:
            return False
        try:
            return looks_like_ps(json.loads(answer.body))
        except ValueError:
            return False

    async def _scrape_ollama(self, client: HttpClient) -> ServerMetrics:
        started = self._clock()
        answer = await self._get(client, self.endpoint.origin + "/api/ps", 1024 * 1024, "/api/ps")
        if isinstance(answer, ServerMetrics):
            return answer
        if answer.status_code != 200:
            return self._failed(f"error: /api/ps answered HTTP {answer.status_code}", kind="ollama")
        try:
            payload = json.loads(answer.body)
        except ValueError:
            return self._failed("error: /api/ps is not JSON", kind="ollama")
        metrics = ollama_metrics(payload, wall=self._wall())
        return dataclasses.replace(metrics, scrape_ms=(self._clock() - started) * 1000.0)

    async def _get(
        self, client: HttpClient, url: str, limit: int, what: str
    ) -> _Answer | ServerMetrics:
        """GET bounded as a whole by `timeout_s` (the client's total: a server that trickles bytes is cut
        too); failures come back as ServerMetrics.

        A kept-alive connection the server closed just as it was reused (llama.cpp closes idle ones after
        5 s) is the client's to retry, once, on a new connection; a garbled answer is not sent again.
        """
        try:
            return await self._read(client, url, limit)
        except HttpTimeout:
            return self._failed(f"no {what}: timed out after {self.timeout_s:g} s ({_where(url)})")
        except ConnectError as e:
            if _refused(e):
                return self._failed(f"no {what}: connection refused ({_where(url)})")
            return self._failed(f"no {what}: cannot connect to {_where(url)} ({short_reason(e)})")
        except BodyTooLarge:
            return self._failed(f"error: {what} is larger than {limit // (1024 * 1024)} MiB")
        except (HttpError, OSError) as e:
            return self._failed(f"error: {what} request failed ({type(e).__name__}: {short_reason(e)})")

    async def _read(self, client: HttpClient, url: str, limit: int) -> _Answer:
        # Some servers guard /metrics with the API key; never send it to another host.
        headers = self.endpoint.sent_headers if _origin(url) == self.endpoint.origin else {}
        headers.update(REQUEST_HEADERS)
        async with await client.stream("GET", url, headers=headers, timeout=self.timeout_s) as r:
            if r.status_code == 200:
                body = await r.read(limit)  # BodyTooLarge over the limit
            else:
                body = await r.read(MAX_ERROR_BYTES, truncate=True)  # an error page: its start explains it
            return _Answer(r.status_code, r.headers.get("content-type", ""), body)

    def _failed(self, status: str, kind: str | None = None) -> ServerMetrics:
        return ServerMetrics(
            kind=kind or self.kind,
            status=status,
            restart_count=self.tracker.restart_count,
            last_restart_time=self.tracker.last_restart_time,
            restarted=self.tracker.restarted_recently(self._clock()),
            scraped_at=self._wall(),
        )


def _refused(e: BaseException) -> bool:
    # The client wraps the OS error (a ConnectError from ConnectionRefusedError): walk the chain.
    seen: BaseException | None = e
    for _ in range(8):
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _where(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host
