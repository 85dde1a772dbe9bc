"""Successive scrapes of one server, parsed by prometheus_client only where a line changed.

A server's /metrics page changes little between two scrapes 2 s apart: under load about half of the
lines lpxtop reads are byte-for-byte the same (idle buckets, gauges at rest, counters of other
models). `ReParser` keeps what prometheus_client made of each line of the previous scrape and sends
it only the lines it has not seen, so a scrape costs about half as much. The result is the same
`Exposition` that `Exposition.parse(keep_families(text, families))` gives (a test checks this on
every capture and on a live sequence of pages).

It follows the family context that prometheus_client's text parser keeps, because that context
changes a sample's name: a counter family without `_total` in its name gets `_total` appended to its
samples (all of them, also those a later TYPE line made the family's). Every other sample comes out of the
parser with its own name, so a line and that one fact decide what the line parses to.

Before the loop reads a page line by line, a comprehension drops most lines that cannot belong to
the families, by their first characters (on the simulated vLLM page, 554 lines become ~140).

A changed line in the plainest form, `name{label="value",...} number`, with no escapes, spaces,
timestamp or `__name__` label, is read directly (`_read_simple`); prometheus_client reads every other
line, and every HELP/TYPE line whose words it would split otherwise, or whose type is not one of the
plain four, makes the whole page its to read. A line is what prometheus_client takes for one: text
between two "\n", stripped of blanks at both ends.

What it earns (benchmarks/metrics_parse.py, CPU per page, 200 simulated vLLM pages of 554 lines with
290 in lpxtop's families and 20 requests between two pages, on the 2-core VM with other work on it):
ReParser 0.74 ms, 0.19 ms for the scrapes between two histogram reads; prometheus_client over the same
lines 3.6 ms, over the whole page 5.4 ms. It is held to prometheus_client by a differential test
(tests/unit/test_server_reparse_differential.py: generated and mutated pages, 14,000 in the long run):
the same samples, or a refusal with the same reason.
"""

from __future__ import annotations

import math
import re

from lpxtop.engine.scrape.exposition import Exposition, Point, as_float
from lpxtop.engine.scrape.metric_names import belongs, keep_families, sample_name

# Remembered "is this metric name one lpxtop reads" answers; a page with more names than this (a
# server with unbounded metric names) starts the memo over instead of growing it.
MAX_NAMES = 4096

_ALLOWED_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}

Parsed = tuple[str, Point] | None  # (sample name, point); None: a NaN sample, which carries no value


_DROP, _KEEP, _HISTOGRAM = 0, 1, 2
_UNREAD, _WHOLE = object(), object()


class ReParser:
    """Parses successive pages of one server, keeping only the families in `families`.

    `parse(text, histograms=False)` also leaves out the families in `histograms` (the latency
    histograms, most of a page's changing lines), for a scrape that needs only gauges and counters.
    """

    def __init__(self, families: frozenset[str], histograms: frozenset[str] = frozenset()) -> None:
        self.families = families
        self.histograms = histograms
        self._belongs: dict[str, int] = {}
        # each HELP/TYPE line's reading (_comment), with and without the histograms; bounded as _belongs
        self._comments: dict[bool, dict[str, object]] = {True: {}, False: {}}
        self._seen: dict[tuple[str, bool], Parsed] = {}  # the previous page's lines
        self._seen_histograms: dict[tuple[str, bool], Parsed] = {}  # the last page read with its histograms
        # What a line the loop keeps starts with (see parse), with and without the latency histograms
        self._heads = {True: _heads(families), False: _heads(families - histograms)}

    def parse(self, text: str, histograms: bool = True) -> Exposition:
        """The families' samples of `text`; raises NotPrometheusText as Exposition.parse does."""
        lines: list[tuple[str, bool]] = []  # the kept sample lines, in order: (line, counter-renamed)
        family_count = 0
        name, typ, allowed = "", "untyped", ()
        family_start = 0  # where the current family's samples begin in `lines`
        belongs_memo = self._belongs  # _kept's memo, read inline: this loop runs once per candidate line
        size, heads = self._heads[histograms]
        # The loop drops, without changing any state, the sample lines that start with none of the
        # families' names, and the HELP/TYPE lines in the usual form ("# HELP name", the name right after
        # one space) whose name starts with none of them. Most of them are dropped here first, in a
        # comprehension of C calls: a line whose first `size` characters begin none of those starts. Every
        # other comment line goes to the loop, which reads it as before.
        candidates = [
            line
            for line in text.split("\n")
            if line[:size] in heads
            or (line[:1] == "#" and not (line.startswith(_USUAL) and line[7:8].strip()))
            or line[:1].isspace()
        ]
        comments = self._comments[histograms]
        for line in candidates:
            line = line.strip()  # as prometheus_client (and the text format) reads a line
            if line.startswith("#"):
                # what a HELP/TYPE line says does not change between pages: read once (_comment)
                said = comments.get(line, _UNREAD)
                if said is _UNREAD:
                    if len(comments) >= MAX_NAMES:
                        comments.clear()
                    said = comments[line] = self._comment(line, histograms)
                if said is None:
                    continue
                if said is _WHOLE:
                    return self._whole(text, histograms)
                comment_name, comment_type = said  # type: ignore[misc]
                if comment_name != name:
                    name, typ, family_count = comment_name, "untyped", family_count + 1
                    allowed, family_start = (name,), len(lines)
                if comment_type is not None:
                    typ = comment_type
                    allowed = tuple(name + s for s in _ALLOWED_SUFFIXES.get(typ, ("",)))
                    if family_start < len(lines):
                        # prometheus_client names a family's samples by its type when the family ends:
                        # a TYPE line after some of them renames those too (or no longer renames them)
                        renamed = _renamed(typ, name)
                        lines[family_start:] = [(kept, renamed) for kept, _ in lines[family_start:]]
                continue
            sample = _sample_name(line).group()
            if not sample:
                continue
            kind = belongs_memo.get(sample)
            if kind is None:
                if not self._kept(sample, histograms):
                    continue
            elif kind == _DROP or (kind == _HISTOGRAM and not histograms):
                continue
            if sample not in allowed:  # prometheus_client makes it an untyped family of its own
                name, typ, allowed = "", "untyped", ()
                family_count += 1
                family_start = len(lines) + 1
            lines.append((line, _renamed(typ, name)))

        seen = self._seen
        if histograms:
            # the histograms' lines were last read a few scrapes ago: a bucket nothing landed in since is
            # the same line
            seen = {**self._seen_histograms, **seen}
        new = [key for key in dict.fromkeys(lines) if key not in seen]
        if new:
            parsed = _parse_lines(new)
            if parsed is None:  # not as expected, or a line the parser rejects: let it read the page
                return self._whole(text, histograms)
            seen.update(zip(new, parsed))
        samples: dict[str, list[Point]] = {}
        for key in lines:
            got = seen[key]
            if got is not None:
                samples.setdefault(got[0], []).append(got[1])
        # what the next page is compared with: this page's lines only, so the memo stays page-sized
        self._seen = {key: seen[key] for key in lines}
        if histograms:
            self._seen_histograms = self._seen
        return Exposition(samples, family_count)

    def _comment(self, line: str, histograms: bool) -> tuple[str, str | None] | object | None:
        """What a comment line means to the loop: None (not one of the families' HELP/TYPE lines),
        _WHOLE (prometheus_client must read the page), or (family name, its type; None for HELP)."""
        parts = line.split(None, 3)
        if len(parts) < 3 or parts[1] not in ("HELP", "TYPE") or not self._kept(parts[2], histograms):
            return None
        if parts[1] == "TYPE" and len(parts) < 4:
            return _WHOLE  # prometheus_client rejects it: let it say why
        if not _plain_comment(line, parts[2], whole=parts[1] == "TYPE"):
            return _WHOLE  # its words split otherwise there: let it read them
        if parts[1] == "HELP":
            return parts[2], None
        if parts[3] not in _ALLOWED_SUFFIXES and parts[3] != "untyped":
            return _WHOLE  # prometheus_client's to accept or refuse
        return parts[2], parts[3]

    def _kept(self, name: str, histograms: bool) -> bool:
        kind = self._belongs.get(name)
        if kind is None:
            if len(self._belongs) >= MAX_NAMES:
                self._belongs.clear()
            if not belongs(name, self.families):
                kind = _DROP
            else:
                kind = _HISTOGRAM if belongs(name, self.histograms) else _KEEP
            self._belongs[name] = kind
        return kind == _KEEP or (kind == _HISTOGRAM and histograms)

    def _whole(self, text: str, histograms: bool) -> Exposition:
        self._seen, self._seen_histograms = {}, {}
        families = self.families if histograms else self.families - self.histograms
        return Exposition.parse(keep_families(text, families))


_USUAL = ("# HELP ", "# TYPE ")


def _renamed(typ: str, family: str) -> bool:
    """Whether prometheus_client appends `_total` to the name of a sample of `family`: every sample of a
    counter family whose name lacks it. A counter's samples are named as the family, except those a TYPE
    line re-typed after them (`x_bucket` of a histogram `x` made a counter becomes `x_bucket_total`)."""
    return typ == "counter" and not family.endswith("_total")
# Characters Python's str.split() takes for blanks and prometheus_client's comment splitting does not
# (it splits on ASCII blanks only), and the quote it reads names in: a kept HELP/TYPE line with one of
# them before its name's end is left to prometheus_client.
_UNUSUAL_BLANKS = re.compile(r'["\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]')


def _plain_comment(line: str, name: str, whole: bool = False) -> bool:
    """A HELP/TYPE line whose words str.split() finds as prometheus_client does: no quote and no other
    blank than ASCII ones up to the name's end, or in the `whole` line (a TYPE line: str.split() also
    skips such a blank before the type, where prometheus_client keeps it as part of the type). A HELP
    line's text after the name is not read here."""
    end = len(line) if whole else line.find(name) + len(name) + 1
    return _UNUSUAL_BLANKS.search(line, 0, end) is None


def _heads(families: frozenset[str]) -> tuple[int, frozenset[str]]:
    """How a line the families can own begins: its first `size` characters are one of `heads`.

    A sample name is a family name or one with a suffix, and a HELP/TYPE line in the usual form names
    one; `size` is the shortest of those starts, so every such line's first `size` characters are the
    first `size` characters of one of them.
    """
    starts = [*families, *(usual + name for usual in _USUAL for name in families)]
    if not starts:
        return 1, frozenset()
    size = min(map(len, starts))
    return size, frozenset(start[:size] for start in starts)


# What sample_name() returns, in one C call: the text before the first "{", space or tab.
_sample_name = re.compile(r"[^{ \t]*").match
_SIMPLE_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ \t]+)")
_SIMPLE_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_NOT_SIMPLE = object()


def _read_simple(line: str, renamed: bool) -> Parsed | object:
    """What prometheus_client makes of a line in the plainest form, or _NOT_SIMPLE for any other line."""
    match = _SIMPLE_SAMPLE.fullmatch(line)
    if match is None:
        return _NOT_SIMPLE
    name, label_text, number = match.groups()
    labels: dict[str, str] = {}
    if label_text:
        at, end = 0, len(label_text)
        while True:
            pair = _SIMPLE_LABEL.match(label_text, at)
            if pair is None or pair.group(1) in labels:
                return _NOT_SIMPLE  # a repeated label: prometheus_client refuses the line
            labels[pair.group(1)] = pair.group(2)
            at = pair.end()
            if at == end:
                break
            if label_text[at] != "," or at + 1 == end:
                return _NOT_SIMPLE  # a trailing comma or spaces: prometheus_client's rules
            at += 1
        if "__name__" in labels:
            return _NOT_SIMPLE
    if "_" in number:
        return _NOT_SIMPLE  # prometheus_client refuses it; let it say so
    try:
        value = float(number)
    except ValueError:
        return _NOT_SIMPLE
    if math.isnan(value):
        return None
    if renamed:
        name += "_total"
    return name, Point(tuple(sorted(labels.items())), value)


def _parse_lines(keys: list[tuple[str, bool]]) -> list[Parsed] | None:
    """Each line's reading (in order); None when prometheus_client's count does not come out even."""
    out: list[Parsed | object] = [_read_simple(line, renamed) for line, renamed in keys]
    rest = [key for key, got in zip(keys, out) if got is _NOT_SIMPLE]
    if not rest:
        return out  # type: ignore[return-value]
    slow = iter(_parse_with_prometheus_client(rest) or ())
    merged = [next(slow, _NOT_SIMPLE) if got is _NOT_SIMPLE else got for got in out]
    if any(got is _NOT_SIMPLE for got in merged):
        return None
    return merged  # type: ignore[return-value]


def _parse_with_prometheus_client(keys: list[tuple[str, bool]]) -> list[Parsed] | None:
    """prometheus_client's reading of each line (in order); None when the count does not come out even.

    Lines that keep their name are given first, with no family around them (each becomes an untyped
    family of its own, named as written); each renamed line follows a counter TYPE line of its name.
    """
    plain = [line for line, renamed in keys if not renamed]
    text = "\n".join(plain)
    for line, renamed in keys:
        if renamed:
            text += f"\n# TYPE {sample_name(line)} counter\n{line}"
    out: list[Parsed] = []
    # imported here, not with the module: ~0.1 s that would otherwise come before the dashboard's first frame
    from prometheus_client.parser import text_string_to_metric_families

    try:
        for family in text_string_to_metric_families(text + "\n"):
            for s in family.samples:
                value = as_float(s.value)
                if math.isnan(value):
                    out.append(None)
                    continue
                labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
                out.append((s.name, Point(labels, value)))
    except Exception:  # noqa: BLE001 - ValueError, IndexError, TypeError... on bad input
        return None
    if len(out) != len(keys):
        return None
    # the output follows the text: plain lines first, then the renamed ones
    order = [k for k in keys if not k[1]] + [k for k in keys if k[1]]
    by_key = dict(zip(order, out))
    return [by_key[k] for k in keys]
