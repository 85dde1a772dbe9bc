"""A client of Prometheus' HTTP API (`/api/v1/query`, `/api/v1/query_range`), bounded in time and size.

Plain GETs through lpxtop's own HTTP client (lpxtop/http/). Every query has a deadline (sent
to Prometheus as `timeout=` too, so it stops working on it), a cap on the answer's bytes and on the
series kept; each failure becomes a `PromError` whose message is one line that says what to do.

Everything Prometheus sends that lpxtop may show — label names and values, error messages, warnings —
passes `textsafe` here, where it enters: no terminal control sequence (a window title, a clipboard
write) reaches the dashboard, stderr or JSON, and the bearer token is masked if a proxy echoes it.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

from lpxtop.http import BodyTooLarge, ConnectError, HttpClient, HttpError, HttpTimeout, Timeout
from lpxtop.textsafe import scrub, scrub_recurring

DEFAULT_TIMEOUT_S = 5.0
MAX_SERIES = 2000  # per query: a selector that matches a whole cluster's series is cut here
MAX_BYTES = 8 * 1024 * 1024
MAX_POINTS = 11000  # Prometheus' own limit on a range query's points per series


class PromError(Exception):
    """A query that got no usable answer; the message is one line for the status bar."""


@dataclass
class Series:
    """One series of an answer: its labels, and its (time, value) points (one for an instant query).
    NaN and ±Inf values are dropped (a histogram_quantile with no observations is NaN)."""

    labels: dict[str, str]
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def value(self) -> float | None:
        return self.points[-1][1] if self.points else None


@dataclass
class Answer:
    series: list[Series]
    truncated: int = 0  # series left out over MAX_SERIES
    warnings: tuple[str, ...] = ()


def normalize_base(url: str) -> str:
    """`prom:9090` or `http://prom:9090/` → `http://prom:9090` (a path prefix such as /prometheus is kept)."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not a Prometheus URL (try http://127.0.0.1:9090)")
    if parts.username or parts.password:  # never sent, and it would be shown in every status line
        raise ValueError("credentials in the URL are not supported: put a bearer token in an environment "
                         "variable and name it with --prometheus-token-env")
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


class PromClient:
    """Queries one Prometheus. `headers` may carry an Authorization header (never shown)."""

    def __init__(self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, max_series: int = MAX_SERIES,
                 max_bytes: int = MAX_BYTES, headers: Mapping[str, str] | None = None) -> None:
        self.base = normalize_base(base_url)
        self.timeout_s = timeout_s
        self.max_series = max_series
        self.max_bytes = max_bytes
        self.headers = dict(headers or {})

    async def query(self, client: HttpClient, promql: str, at: float | None = None) -> Answer:
        params = {"query": promql, "timeout": f"{self.timeout_s:g}s"}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return await self._get(client, "/api/v1/query", params)

    async def query_range(self, client: HttpClient, promql: str, start: float, end: float, step: float) -> Answer:
        step = max(step, (end - start) / MAX_POINTS, 0.001)
        params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}",
                  "timeout": f"{self.timeout_s:g}s"}
        return await self._get(client, "/api/v1/query_range", params)

    async def _get(self, client: HttpClient, path: str, params: dict[str, str]) -> Answer:
        url = f"{self.base}{path}?{urlencode(params)}"
        timeout = Timeout(connect=self.timeout_s, read=self.timeout_s, write=self.timeout_s, pool=self.timeout_s)
        try:
            response = await asyncio.wait_for(
                client.get(url, headers={"Accept": "application/json", **self.headers}, timeout=timeout,
                           max_bytes=self.max_bytes),
                self.timeout_s + 0.5,
            )
        except (asyncio.TimeoutError, HttpTimeout):
            raise PromError(f"Prometheus at {self.base} did not answer within {self.timeout_s:g} s") from None
        except BodyTooLarge:
            raise PromError(f"Prometheus' answer was larger than {self.max_bytes // 2**20} MiB: narrow --match") from None
        except ConnectError as exc:
            raise PromError(f"cannot reach Prometheus at {self.base}: {_reason(exc)}") from None
        except HttpError as exc:
            raise PromError(f"Prometheus at {self.base}: {_reason(exc)}") from None
        except OSError as exc:
            raise PromError(f"cannot reach Prometheus at {self.base}: {_clean(str(exc.strerror or exc))}") from None
        return self._decode(response.status_code, response.content)

    def _decode(self, status: int, body: bytes) -> Answer:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
            doc = None
        if not isinstance(doc, dict) or "status" not in doc:
            raise PromError(f"{self.base} answered HTTP {status} with something that is not Prometheus' API "
                            "(a proxy, or the wrong port?)")
        if doc.get("status") != "success":
            error = _clean(str(doc.get("error") or "no reason given"))[:300]
            kind = _clean(str(doc.get("errorType") or f"HTTP {status}"))[:60]
            raise PromError(f"Prometheus refused a query ({kind}): {error}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PromError(f"{self.base}: an answer without data")
        kind = data.get("resultType")
        result = data.get("result")
        if kind == "scalar" and isinstance(result, list):
            return Answer([Series({}, _points([result]))])
        if kind not in ("vector", "matrix") or not isinstance(result, list):
            raise PromError(f"{self.base}: an answer of type {_clean(repr(kind))[:60]}, not a vector or a matrix")
        truncated = max(0, len(result) - self.max_series)
        series: list[Series] = []
        for item in result[: self.max_series]:
            if not isinstance(item, dict):
                continue
            metric = item.get("metric")
            labels = ({scrub_recurring(str(k)): scrub_recurring(str(v)) for k, v in metric.items()}
                      if isinstance(metric, dict) else {})
            raw = item.get("values") if kind == "matrix" else [item.get("value")]
            series.append(Series(labels, _points(raw)))
        raw_warnings = doc.get("warnings")
        warnings = tuple(_clean(str(w))[:200] for w in raw_warnings[:10]) if isinstance(raw_warnings, list) else ()
        return Answer(series, truncated, warnings)


def _points(raw: object) -> list[tuple[float, float]]:
    points: list[tuple[float, float]] = []
    if not isinstance(raw, list):
        return points
    for pair in raw[:MAX_POINTS]:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            continue
        try:
            t, v = float(pair[0]), float(pair[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(t) and math.isfinite(v):
            points.append((t, v))
    return points


def _clean(text: str) -> str:
    """Text from Prometheus (or from a proxy in front of it) as lpxtop may show it: one line, no control
    sequences, secrets (the bearer token among them) masked."""
    return scrub(text) or ""


def _reason(exc: BaseException) -> str:
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return _clean(cause.strerror.lower())
    return _clean(str(exc) or type(exc).__name__)
