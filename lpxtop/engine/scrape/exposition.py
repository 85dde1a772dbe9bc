"""A parsed /metrics body, indexed by sample name, with the lookups the normalizer needs.

Parsing is prometheus_client's (`text_string_to_metric_families`), never regular expressions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lpxtop.engine.scrape.metric_names import Ref

Labels = tuple[tuple[str, str], ...]


class NotPrometheusText(ValueError):
    """The body did not parse as Prometheus text exposition format."""


@dataclass(frozen=True)
class Point:
    """One sample: its labels (sorted pairs) and value."""

    labels: Labels
    value: float

    def label(self, name: str) -> str | None:
        for k, v in self.labels:
            if k == name:
                return v
        return None


class Exposition:
    """Every sample of one scrape, by the sample name prometheus_client gave it.

    A series (name and labels) written twice keeps its first sample, as Prometheus does since 2.52
    (prometheus/prometheus#12933: "only first sample for each unique time series is appended"); the
    others are counted in `duplicates`. Both the whole parse and ReParser's build one through here, so
    they agree on it.
    """

    def __init__(self, samples: Mapping[str, list[Point]], families: int) -> None:
        self.duplicates = 0
        for points in samples.values():
            if len(points) > 1:
                seen: set[Labels] = set()
                kept = []
                for p in points:
                    if p.labels not in seen:
                        seen.add(p.labels)
                        kept.append(p)
                if len(kept) != len(points):
                    self.duplicates += len(points) - len(kept)
                    points[:] = kept
        self._samples = samples
        self.families = families

    @classmethod
    def parse(cls, text: str) -> Exposition:
        """Parse exposition text; raise NotPrometheusText with the parser's reason if it is not."""
        samples: dict[str, list[Point]] = {}
        families = 0
        # imported here, not with the module: ~0.1 s that would otherwise come before the dashboard's first frame
        from prometheus_client.parser import text_string_to_metric_families

        try:
            for family in text_string_to_metric_families(text):
                families += 1
                for s in family.samples:
                    value = as_float(s.value)
                    if math.isnan(value):
                        continue  # NaN gauges (an engine with nothing to report) carry no value
                    labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
                    samples.setdefault(s.name, []).append(Point(labels, value))
        except Exception as e:  # the parser raises ValueError, IndexError, TypeError... on bad input
            raise NotPrometheusText(short_reason(e)) from None
        return cls(samples, families)

    @property
    def by_name(self) -> Mapping[str, list[Point]]:
        """Every sample, by name, in the page's order."""
        return self._samples

    @property
    def names(self) -> Iterable[str]:
        return self._samples.keys()

    def has(self, name: str) -> bool:
        return bool(self.lookup(Ref(name)))

    def lookup(self, r: Ref) -> list[Point]:
        """Samples of `r` (trying the `_total` spellings a counter may have), filtered by its labels."""
        for name in _spellings(r.name):
            points = self._samples.get(name)
            if points:
                if r.match:
                    points = [p for p in points if all(p.label(k) == v for k, v in r.match)]
                if points:
                    return points
        return []

    def first(self, alternatives: Iterable[Ref]) -> tuple[Ref, list[Point]] | None:
        """The first alternative present in this scrape, with its samples."""
        for r in alternatives:
            points = self.lookup(r)
            if points:
                return r, points
        return None

    def histogram(self, r: Ref) -> dict[Labels, tuple[tuple[float, float], ...]]:
        """Cumulative buckets of histogram `r` per label set (without `le`), sorted by bound."""
        series: dict[Labels, list[tuple[float, float]]] = {}
        for p in self._samples.get(r.name + "_bucket", ()):
            le = p.label("le")
            if le is None:
                continue
            if r.match and not all(p.label(k) == v for k, v in r.match):
                continue
            try:
                bound = float(le)
            except ValueError:
                continue
            key = tuple(kv for kv in p.labels if kv[0] != "le")
            series.setdefault(key, []).append((bound, p.value))
        return {k: tuple(sorted(v)) for k, v in series.items() if v}


    def histogram_sums(self, r: Ref) -> dict[Labels, float]:
        """The `_sum` of histogram `r` per label set (the keys `histogram` gives)."""
        out: dict[Labels, float] = {}
        for p in self._samples.get(r.name + "_sum", ()):
            if r.match and not all(p.label(k) == v for k, v in r.match):
                continue
            out[p.labels] = p.value
        return out


def _spellings(name: str) -> tuple[str, ...]:
    # prometheus_client's text parser appends `_total` to counter samples that lack it
    # (TGI's `tgi_request_success` arrives as `tgi_request_success_total`); an untyped sample
    # keeps its own name. Try the name as written first.
    if name.endswith("_total"):
        return (name, name[: -len("_total")])
    return (name, name + "_total")


def as_float(value: float | int) -> float:
    """A sample's value as a float; an integer too large for one is infinite, as float("1e999") is.

    prometheus_client gives integers for values written without a point or exponent: float() of a
    400-digit one raises OverflowError, where the same number written 1e400 reads as inf.
    """
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def short_reason(e: BaseException, limit: int = 80) -> str:
    """An exception's message on one line of at most `limit` characters."""
    text = str(e).strip().replace("\n", " ") or type(e).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
