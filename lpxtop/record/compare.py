"""Two recordings side by side (before/after a `--max-num-seqs` or driver change).

Each endpoint's client-side percentiles over the whole recording, computed from the recorded samples
with the same `Percentiles` the live windows use, in A and in B, and the change. Endpoints are paired by
name; when each recording has exactly one endpoint left unpaired (the server moved to another port),
those two are paired.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lpxtop.model.events import SampleEvent, ScrapeEvent
from lpxtop.model.probe import Percentiles
from lpxtop.record.reading import Recording
from lpxtop.record.records import EndpointInfo
from lpxtop.record.timeparse import format_moment

# (key, label, unit, True when lower is better)
MEASURES = (
    ("ttft_ms", "TTFT", "ms", True),
    ("itl_ms", "ITL", "ms", True),
    ("tpot_ms", "TPOT", "ms", True),
    ("e2e_ms", "E2E", "ms", True),
    ("output_tokens_per_s", "tok/s", "tok/s", False),
)
QUANTILES = ("p50", "p95", "p99", "mean", "max")
SERVER_MEASURES = (
    ("requests_waiting", "queue waiting (mean)", True),
    ("requests_running", "running (mean)", False),
    ("kv_cache_usage", "KV cache used (mean)", True),
)


@dataclass
class EndpointSummary:
    """One endpoint over a whole recording."""

    name: str
    url: str = ""
    model: str | None = None
    probes: int = 0
    ok: int = 0
    errors: Counter = field(default_factory=Counter)
    percentiles: dict[str, Percentiles | None] = field(default_factory=dict)
    server_means: dict[str, float | None] = field(default_factory=dict)

    @property
    def error_rate(self) -> float | None:
        return (self.probes - self.ok) / self.probes if self.probes else None


@dataclass
class RecordingSummary:
    path: Path
    start: float | None
    end: float | None
    endpoints: dict[str, EndpointSummary]
    damage: str | None = None

    @property
    def label(self) -> str:
        if self.start is None or self.end is None:
            return self.path.name
        return f"{self.path.name} ({format_moment(self.start, with_date=True)}, {(self.end - self.start) / 60:.1f} min)"


def summarize(recording: Recording) -> RecordingSummary:
    """Every sample and scrape of the recording, summarized per endpoint."""
    values: dict[str, dict[str, array]] = {}
    server: dict[str, dict[str, list[float]]] = {}
    summaries: dict[str, EndpointSummary] = {}

    def summary(name: str) -> EndpointSummary:
        if name not in summaries:
            summaries[name] = EndpointSummary(name)
            values[name] = {key: array("d") for key, *_ in MEASURES}
            server[name] = {key: [] for key, *_ in SERVER_MEASURES}
        return summaries[name]

    for event in recording.events(types=(SampleEvent, ScrapeEvent, EndpointInfo)):
        record = event.record
        if isinstance(record, SampleEvent):
            s, sample = summary(record.endpoint), record.sample
            s.probes += 1
            if not sample.ok:
                s.errors[sample.error_kind or "other"] += 1
                continue
            s.ok += 1
            if sample.model and not s.model:
                s.model = sample.model
            v = values[record.endpoint]
            for key, value in (("ttft_ms", sample.ttft_ms), ("tpot_ms", sample.tpot_ms), ("e2e_ms", sample.e2e_ms),
                               ("output_tokens_per_s", sample.decode_tokens_per_s)):
                if value is not None and value == value:
                    v[key].append(float(value))
            v["itl_ms"].extend(sample.itl_ms)
        elif isinstance(record, ScrapeEvent):
            s = summary(record.endpoint)
            if record.metrics.status == "ok":
                for key, *_ in SERVER_MEASURES:
                    value = getattr(record.metrics, key)
                    if value is not None:
                        server[record.endpoint][key].append(float(value))
        elif isinstance(record, EndpointInfo):
            s = summary(record.config.name)
            s.url = record.config.url
            s.model = record.model or s.model
    for name, s in summaries.items():
        s.percentiles = {key: Percentiles.of(values[name][key]) for key, *_ in MEASURES}
        s.server_means = {key: (sum(xs) / len(xs) if xs else None) for key, xs in server[name].items()}
    span = recording.time_range()
    return RecordingSummary(recording.path, span[0] if span else None, span[1] if span else None, summaries,
                            recording.damage_summary())


@dataclass(frozen=True)
class Change:
    measure: str  # e.g. "TTFT p99"
    unit: str
    a: float | None
    b: float | None
    lower_is_better: bool

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def relative(self) -> float | None:
        if self.a is None or self.b is None or self.a == 0:
            return None
        return (self.b - self.a) / abs(self.a)

    @property
    def verdict(self) -> str:
        """"better", "worse" or "same" (within 1 %), from B's point of view."""
        delta, rel = self.delta, self.relative
        if delta is None:
            return "--"
        if delta == 0 or (rel is not None and abs(rel) < 0.01):
            return "same"
        return "better" if (delta < 0) == self.lower_is_better else "worse"

    def to_json(self) -> dict:
        return {"measure": self.measure, "unit": self.unit, "a": self.a, "b": self.b, "change": self.delta,
                "change_pct": None if self.relative is None else round(100 * self.relative, 2),
                "verdict": self.verdict}


@dataclass(frozen=True)
class EndpointComparison:
    a_name: str | None
    b_name: str | None
    changes: tuple[Change, ...]
    a_probes: int
    b_probes: int

    @property
    def label(self) -> str:
        if self.a_name == self.b_name or self.b_name is None:
            return str(self.a_name)
        if self.a_name is None:
            return str(self.b_name)
        return f"{self.a_name} ↔ {self.b_name}"

    def change(self, measure: str) -> Change | None:
        return next((c for c in self.changes if c.measure == measure), None)


@dataclass(frozen=True)
class Comparison:
    a: RecordingSummary
    b: RecordingSummary
    endpoints: tuple[EndpointComparison, ...]

    def to_json(self) -> dict:
        return {
            "a": {"file": str(self.a.path), "start": self.a.start, "end": self.a.end, "damage": self.a.damage},
            "b": {"file": str(self.b.path), "start": self.b.start, "end": self.b.end, "damage": self.b.damage},
            "endpoints": [
                {"a": e.a_name, "b": e.b_name, "a_probes": e.a_probes, "b_probes": e.b_probes,
                 "changes": [c.to_json() for c in e.changes]}
                for e in self.endpoints
            ],
        }


def pair_endpoints(a: dict[str, EndpointSummary], b: dict[str, EndpointSummary]) -> list[tuple[str | None, str | None]]:
    pairs: list[tuple[str | None, str | None]] = [(name, name) for name in a if name in b]
    only_a = [name for name in a if name not in b]
    only_b = [name for name in b if name not in a]
    if len(only_a) == 1 and len(only_b) == 1:
        return [*pairs, (only_a[0], only_b[0])]
    return [*pairs, *((name, None) for name in only_a), *((None, name) for name in only_b)]


def compare(a: RecordingSummary, b: RecordingSummary) -> Comparison:
    rows = []
    for a_name, b_name in pair_endpoints(a.endpoints, b.endpoints):
        ea = a.endpoints.get(a_name) if a_name else None
        eb = b.endpoints.get(b_name) if b_name else None
        changes: list[Change] = []
        for key, label, unit, lower in MEASURES:
            pa = ea.percentiles.get(key) if ea else None
            pb = eb.percentiles.get(key) if eb else None
            for q in QUANTILES:
                changes.append(Change(f"{label} {q}", unit, getattr(pa, q) if pa else None,
                                      getattr(pb, q) if pb else None, lower))
        changes.append(Change("error rate", "%", _pct(ea.error_rate if ea else None),
                              _pct(eb.error_rate if eb else None), True))
        for key, label, lower in SERVER_MEASURES:
            changes.append(Change(f"server {label}", "", ea.server_means.get(key) if ea else None,
                                  eb.server_means.get(key) if eb else None, lower))
        rows.append(EndpointComparison(a_name, b_name, tuple(changes), ea.probes if ea else 0, eb.probes if eb else 0))
    return Comparison(a, b, tuple(rows))


def _pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def compare_files(a: str | Path, b: str | Path) -> Comparison:
    with Recording(a) as ra, Recording(b) as rb:
        return compare(summarize(ra), summarize(rb))


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "--"
    if unit == "ms" and abs(value) >= 1000:
        return f"{value / 1000:.2f}s"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_change(change: Change) -> str:
    if change.delta is None:
        return "--"
    text = f"{'+' if change.delta >= 0 else '−'}{fmt_value(abs(change.delta), change.unit)}"
    if change.relative is not None:
        text += f" ({100 * change.relative:+.0f}%)"
    return text


def render_comparison(comparison: Comparison) -> str:
    """A plain table: per endpoint, each figure in A and B, the change, better or worse."""
    lines = [f"A: {comparison.a.label}", f"B: {comparison.b.label}"]
    for summary, tag in ((comparison.a, "A"), (comparison.b, "B")):
        if summary.damage:
            lines.append(f"{tag} is damaged: {summary.damage}")
    for endpoint in comparison.endpoints:
        lines.append("")
        lines.append(f"{endpoint.label}   probes A {endpoint.a_probes}, B {endpoint.b_probes}")
        lines.append(f"  {'':<26}{'A':>10}{'B':>10}  {'change':<18}")
        for c in endpoint.changes:
            if c.a is None and c.b is None:
                continue
            unit = f" {c.unit}" if c.unit and c.unit != "%" else ("%" if c.unit == "%" else "")
            lines.append(f"  {c.measure + unit:<26}{fmt_value(c.a, c.unit):>10}{fmt_value(c.b, c.unit):>10}  "
                         f"{fmt_change(c):<18}{c.verdict if c.verdict != 'same' else ''}")
    return "\n".join(lines)
