"""Differential test of the /metrics fast path (ReParser) against prometheus_client's parser (rule 7).

What lpxtop reads from a page is prometheus_client's reading of the lines of the families it knows
(`Exposition.parse(keep_families(page, families))`): on every page, generated or mutated, ReParser
must give the same samples (names, labels, values), or refuse it with the same reason, fresh and
after a page it remembers lines from; and the normalizer must take whatever it gives without raising.
On the real captures, where the whole page is valid, that reading must also equal prometheus_client's
reading of the whole page. The long run (`-m slow`) checks 14,000 pairs of pages (2,000 drawn by
hypothesis' strategies, which shrink a failure to a small page, and 12,000 from seeds it draws); the
main suite 520.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lpxtop.engine.scrape.exposition import Exposition, NotPrometheusText
from lpxtop.engine.scrape.metric_names import (
    KINDS,
    LLAMACPP,
    TGI,
    VLLM,
    belongs,
    family_names,
    histogram_names,
    keep_families,
)
from lpxtop.engine.scrape.reparse import ReParser
from lpxtop.engine.scrape.tracker import MetricsTracker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
CAPTURES = sorted(p.name for p in FIXTURES.glob("*.txt") if "families" not in p.name)
PAGES = {name: (FIXTURES / name).read_text(encoding="utf-8") for name in CAPTURES}

# Names the pages are made of: the kinds' own (kept), look-alikes and others (dropped).
KEPT = sorted({n for k in (VLLM, TGI, LLAMACPP) for n in family_names(k)})
OTHERS = ["process_cpu_seconds", "http_requests", "vllm:not_a_family", "tgi_request_success_of_other",
          "vllm:num_requests_running_x", "python_gc_objects_collected", "llamacpp:unknown_thing"]
TYPES = ["counter", "gauge", "histogram", "summary", "untyped", "info", "counter extra", ""]
VALUES = ["0", "1", "3", "2.5", "-1", "1e3", "2.5E-3", "+Inf", "-Inf", "Inf", "NaN", "nan", "1_000", "0x10",
          "1" * 40, "1" * 400, "-0", ".5", "5.", "+3", "١٢", "1e999", "abc", ""]
LABEL_NAMES = ["model_name", "engine", "le", "quantile", "a", "finished_reason", "err", "__name__", "0bad"]
LABEL_VALUE_LIST = ["m", "0", "+Inf", "0.1", "", 'q\\"x', "two\\nlines", "back\\\\", "ü", "a b", "}", "{", ",", '"',
                    "x=y"]
LABEL_VALUES = st.sampled_from(LABEL_VALUE_LIST)
BLANKS = st.sampled_from(["", " ", "  ", "\t"])
NASTY = ["{", "}", '"', "\\", " ", "\t", "\n", "\r", "#", ",", "=", "e", "+", "-", ".", "0", "\x0b", "\x0c",
         "\x1c", "\x85", "\u00a0", "\u2028", "\u3000", "_total", "_bucket", "# TYPE ", "# HELP "]


@st.composite
def sample_line(draw, name: str) -> str:
    labels = draw(st.lists(st.tuples(st.sampled_from(LABEL_NAMES), LABEL_VALUES), max_size=3))
    body = ",".join(f'{k}="{v}"' for k, v in labels)
    if labels and draw(st.booleans()):
        body += draw(st.sampled_from([",", " ", ", "]))
    label_text = "{" + body + "}" if labels or draw(st.booleans()) else ""
    value = draw(st.sampled_from(VALUES))
    stamp = draw(st.sampled_from(["", "", "", " 1700000000000", " -5", "\t17"]))
    sep = draw(st.sampled_from([" ", " ", "\t", "  "]))
    return draw(BLANKS) + name + draw(st.sampled_from(["", "", " "])) + label_text + sep + value + stamp + draw(BLANKS)


@st.composite
def family(draw) -> list[str]:
    name = draw(st.sampled_from(KEPT + OTHERS))
    typ = draw(st.sampled_from(TYPES))
    lines = []
    if draw(st.booleans()):
        lines.append(draw(BLANKS) + f"# HELP {name} " + draw(st.sampled_from(["doc", 'a "quoted" doc', "esc \\n", ""])))
    if typ and draw(st.booleans()):
        lines.append(draw(BLANKS) + f"# TYPE {name} {typ}")
    suffixes = {"histogram": ["_bucket", "_bucket", "_sum", "_count"], "summary": ["", "_sum", "_count"],
                "counter": ["", "_total", "_created"]}.get(typ, [""])
    for _ in range(draw(st.integers(0, 5))):
        lines.append(draw(sample_line(name + draw(st.sampled_from(suffixes)))))
    return lines


@st.composite
def generated_page(draw) -> str:
    lines = [line for fam in draw(st.lists(family(), min_size=1, max_size=8)) for line in fam]
    extras = draw(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(
        ["", "# EOF", "# a comment", "#", "# HELP", "# TYPE x", "   ", "#  TYPE vllm:num_requests_running gauge"]
    )), max_size=3))
    for at, line in extras:
        lines.insert(min(at, len(lines)), line)
    ending = draw(st.sampled_from(["\n", "\n", "\r\n"]))
    return ending.join(lines) + draw(st.sampled_from([ending, ""]))


@st.composite
def mutated(draw, base: st.SearchStrategy[str]) -> str:
    text = draw(base)
    for _ in range(draw(st.integers(1, 6))):
        if not text:
            break
        at = draw(st.integers(0, len(text) - 1))
        how = draw(st.sampled_from(["insert", "delete", "replace", "duplicate line", "swap lines", "cut"]))
        if how == "insert":
            text = text[:at] + draw(st.sampled_from(NASTY)) + text[at:]
        elif how == "delete":
            text = text[:at] + text[at + 1:]
        elif how == "replace":
            text = text[:at] + draw(st.sampled_from(NASTY)) + text[at + 1:]
        elif how == "cut":
            text = text[:at]
        else:
            lines = text.split("\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            if how == "duplicate line":
                lines.insert(j, lines[i])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
    return text


@st.composite
def fixture_excerpt(draw) -> str:
    """A run of lines from a real capture (a whole page costs the long run too much per example)."""
    lines = PAGES[draw(st.sampled_from(CAPTURES))].split("\n")
    start = draw(st.integers(0, max(0, len(lines) - 1)))
    return "\n".join(lines[start:start + draw(st.integers(1, 80))]) + "\n"


pages = st.one_of(generated_page(), mutated(generated_page()), mutated(fixture_excerpt()))
kinds = st.sampled_from([VLLM, TGI, LLAMACPP])


def random_page(rng: random.Random) -> str:
    """The same kind of page as the strategies above, drawn with a plain Random: fifty times cheaper per
    page than hypothesis' draws, for the long run's volume (hypothesis still picks and records seeds)."""
    lines: list[str] = []
    if rng.random() < 0.3:
        lines += PAGES[rng.choice(CAPTURES)].split("\n")[(at := rng.randrange(400)):at + rng.randrange(1, 80)]
    for _ in range(rng.randrange(1, 9)):
        name, typ = rng.choice(KEPT + OTHERS), rng.choice(TYPES)
        blank = rng.choice(["", "", " ", "\t"])
        if rng.random() < 0.5:
            lines.append(blank + f"# HELP {name} " + rng.choice(["doc", 'a "quoted" doc', "esc \\n", ""]))
        if typ and rng.random() < 0.6:
            lines.append(blank + f"# TYPE {name} {typ}")
        suffixes = {"histogram": ["_bucket", "_bucket", "_sum", "_count"], "summary": ["", "_sum", "_count"],
                    "counter": ["", "_total", "_created"]}.get(typ, [""])
        for _ in range(rng.randrange(6)):
            labels = [(rng.choice(LABEL_NAMES), rng.choice(LABEL_VALUE_LIST)) for _ in range(rng.randrange(4))]
            body = ",".join(f'{k}="{v}"' for k, v in labels) + (rng.choice([",", " ", ""]) if labels else "")
            label_text = "{" + body + "}" if labels or rng.random() < 0.2 else ""
            lines.append(rng.choice(["", "", " ", "\t"]) + name + rng.choice(suffixes) + rng.choice(["", "", " "])
                         + label_text + rng.choice([" ", " ", "\t", "  "]) + rng.choice(VALUES)
                         + rng.choice(["", "", "", " 1700000000000", " -5"]) + rng.choice(["", "", " "]))
    for _ in range(rng.randrange(3)):
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["", "# EOF", "# a comment", "#", "# HELP", "   "]))
    text = rng.choice(["\n", "\n", "\r\n"]).join(lines) + "\n"
    for _ in range(rng.randrange(7)):  # mutations, as `mutated` makes them
        if not text:
            break
        at = rng.randrange(len(text))
        how = rng.choice(["insert", "delete", "replace", "cut", "duplicate line", "swap lines"])
        if how == "insert":
            text = text[:at] + rng.choice(NASTY) + text[at:]
        elif how == "delete":
            text = text[:at] + text[at + 1:]
        elif how == "replace":
            text = text[:at] + rng.choice(NASTY) + text[at + 1:]
        elif how == "cut":
            text = text[:at]
        else:
            split = text.split("\n")
            i, j = rng.randrange(len(split)), rng.randrange(len(split))
            if how == "duplicate line":
                split.insert(j, split[i])
            else:
                split[i], split[j] = split[j], split[i]
            text = "\n".join(split)
    return text


def reference(text: str, families: frozenset[str]) -> dict | str:
    try:
        return dict(Exposition.parse(keep_families(text, families)).by_name)
    except NotPrometheusText as e:
        return f"refused: {e}"


def fast(parser: ReParser, text: str, histograms: bool = True) -> dict | str:
    try:
        return dict(parser.parse(text, histograms=histograms).by_name)
    except NotPrometheusText as e:
        return f"refused: {e}"


def check(previous: str, text: str, names) -> None:
    families, hists = family_names(names), histogram_names(names)
    expected = reference(text, families)
    assert fast(ReParser(families, hists), text) == expected  # fresh
    primed = ReParser(families, hists)
    fast(primed, previous)
    assert fast(primed, text) == expected  # after a page it remembers lines from
    assert fast(primed, text, histograms=False) == reference(text, families - hists)
    # back to the histograms after a scrape without them: the lines remembered from their last reading
    assert fast(primed, previous) == reference(previous, families)
    if isinstance(expected, dict):  # and the normalizer takes whatever comes out
        tracker = MetricsTracker()
        for now, page in ((0.0, previous), (2.0, text)):
            try:
                expo = primed.parse(page)
            except NotPrometheusText:
                continue
            metrics = tracker.update(expo, names, now, now)
            for value in (metrics.requests_running, metrics.requests_waiting, metrics.kv_cache_usage,
                          metrics.generation_tokens_per_s, metrics.preemptions_per_s):
                assert value is None or math.isfinite(value)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pages, pages, kinds)
def test_fast_path_equals_prometheus_client(previous: str, text: str, names) -> None:
    check(previous, text, names)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**63))
def test_fast_path_equals_prometheus_client_on_seeded_pages(seed: int) -> None:
    rng = random.Random(seed)
    check(random_page(rng), random_page(rng), rng.choice([VLLM, TGI, LLAMACPP]))


@pytest.mark.slow
@settings(max_examples=2_000, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pages, pages, kinds)
def test_fast_path_equals_prometheus_client_long(previous: str, text: str, names) -> None:
    check(previous, text, names)


@pytest.mark.slow
@settings(max_examples=12_000, deadline=None)
@given(st.integers(0, 2**63))
def test_fast_path_equals_prometheus_client_on_seeded_pages_long(seed: int) -> None:
    rng = random.Random(seed)
    check(random_page(rng), random_page(rng), rng.choice([VLLM, TGI, LLAMACPP]))


@pytest.mark.parametrize("capture", CAPTURES)
@pytest.mark.parametrize("names", KINDS, ids=lambda k: k.kind)
def test_real_pages_read_as_prometheus_client_reads_the_whole_page(capture: str, names) -> None:
    """On a valid page, reading only the kept families' lines changes nothing: the same samples as the
    whole page parsed by prometheus_client, restricted to those families."""
    text = PAGES[capture]
    families = family_names(names)
    whole = {k: v for k, v in Exposition.parse(text).by_name.items() if belongs(k, families)}
    assert fast(ReParser(families, histogram_names(names)), text) == whole


# Cases the generator found, kept as examples (each was a disagreement while the fast path was built).
FOUND = [
    ("leading blanks", '  vllm:num_requests_running{model_name="m"} 3\n'),
    ("leading blank before TYPE", '  # TYPE vllm:num_preemptions counter\nvllm:num_preemptions{model_name="m"} 3\n'),
    ("vertical tab splits nothing for prometheus_client", 'vllm:num_requests_running 1\x0bvllm:num_requests_waiting 2\n'),
    ("\\x1c after the name in TYPE", '# TYPE vllm:num_preemptions\x1ccounter\nvllm:num_preemptions 3\n'),
    ("\\x1c before the type, after a space", '# TYPE vllm:num_preemptions \x1ccounter\nvllm:num_preemptions 3\n'),
    ("\\xa0 before the type, after a space", '# TYPE vllm:num_preemptions \xa0gauge\nvllm:num_preemptions 3\n'),
    ("a 400-digit value", "vllm:num_requests_running " + "1" * 400 + "\n"),
    ("a duplicated series", "vllm:num_requests_running 1\nvllm:num_requests_running 2\n"),
    ("a type prometheus_client refuses", "# TYPE vllm:num_preemptions counter extra\nvllm:num_preemptions 3\n"),
    ("\\u2028 inside a label value", 'vllm:time_to_first_token_seconds_bucket{le="0.1\u2028999"} 0\n'),
    ("a TYPE after the family's samples", "# HELP vllm:prefix_cache_hits doc\nvllm:prefix_cache_hits 5\n"
                                          "# TYPE vllm:prefix_cache_hits counter\n"),
    ("a TYPE that undoes a counter", "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits 5\n"
                                     "# TYPE vllm:prefix_cache_hits gauge\n"),
    ("a histogram made a counter after its buckets", "# TYPE vllm:time_to_first_token_seconds histogram\n"
                                                      'vllm:time_to_first_token_seconds_bucket{le="40.0"} 18\n'
                                                      "# TYPE vllm:time_to_first_token_seconds counter\n"),
    ("a quoted name in HELP", '# HELP "vllm:num_preemptions" doc\n# TYPE vllm:num_preemptions counter\n'
                               "vllm:num_preemptions 3\n"),
]


@pytest.mark.parametrize(("label", "text"), FOUND, ids=[f[0] for f in FOUND])
def test_found_cases(label: str, text: str) -> None:
    check("", text, VLLM)
