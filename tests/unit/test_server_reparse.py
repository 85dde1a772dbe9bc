"""ReParser gives what parsing the kept families of each page whole gives, page after page.

The reference is `Exposition.parse(keep_families(page, families))`, the path the scraper took before
(prometheus_client over the filtered page); pages are the real captures in tests/fixtures/metrics,
pages changed from them line by line, and hand-written pages for the parser's family rules.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from lpxtop.engine.scrape import reparse as server_reparse
from lpxtop.engine.scrape.exposition import Exposition, NotPrometheusText
from lpxtop.engine.scrape.metric_names import (
    KINDS,
    TGI,
    VLLM,
    family_names,
    histogram_names,
    keep_families,
    sample_name,
)
from lpxtop.engine.scrape.reparse import ReParser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"
CAPTURES = sorted(p.name for p in FIXTURES.glob("*.txt"))
NUMBER_AT_END = re.compile(r"(\s)(\d+(?:\.\d+)?(?:e[+-]?\d+)?)$")


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def whole(text: str, families: frozenset[str]) -> dict:
    return dict(Exposition.parse(keep_families(text, families)).by_name)


def changed(text: str, seed: int, share: float = 0.5) -> str:
    """`text` with the value of about `share` of its sample lines changed, as the next scrape would."""
    rng = random.Random(seed)
    out = []
    for line in text.splitlines():
        if not line.startswith("#") and rng.random() < share:
            line = NUMBER_AT_END.sub(lambda m: f"{m.group(1)}{float(m.group(2)) + rng.randint(1, 9)}", line)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("names", KINDS, ids=lambda k: k.kind)
@pytest.mark.parametrize("capture", CAPTURES)
def test_each_capture_parses_as_the_whole_filtered_page(capture: str, names) -> None:
    families = family_names(names)
    text = page(capture)
    try:
        expected = whole(text, families)
    except NotPrometheusText:
        with pytest.raises(NotPrometheusText):
            ReParser(families).parse(text)
        return
    assert dict(ReParser(families).parse(text).by_name) == expected


@pytest.mark.parametrize("capture", CAPTURES)
def test_page_after_page_with_changed_lines(capture: str) -> None:
    families = frozenset().union(*(family_names(k) for k in KINDS))
    text = page(capture)
    try:
        whole(text, families)
    except NotPrometheusText:
        pytest.skip("not a page prometheus_client reads")
    parser = ReParser(families)
    for seed in range(6):
        text = changed(text, seed)
        assert dict(parser.parse(text).by_name) == whole(text, families), seed


def test_the_two_vllm_captures_in_turn() -> None:
    families = family_names(VLLM)
    parser = ReParser(families)
    for name in ["vllm-0.32.0-cpu-local-capture-idle.txt", "vllm-0.32.0-cpu-local-capture-after-load.txt"] * 2:
        assert dict(parser.parse(page(name)).by_name) == whole(page(name), families)


# prometheus_client names a counter's samples `<family>_total` when the family's own name lacks it
# (TGI's counters); a sample that does not fit the family before it is a family of its own, named as
# written. The same line can so parse to two names, depending on the lines above it.
TGI_PAGE = """\
# HELP tgi_request_success Successful requests
# TYPE tgi_request_success counter
tgi_request_success 5
tgi_request_success_created 1.7e9
tgi_request_success 6
# TYPE tgi_queue_size gauge
tgi_queue_size 3
tgi_queue_size NaN
# HELP tgi_batch_current_size no TYPE line: untyped
tgi_batch_current_size 2
tgi_batch_current_size 2
# TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 7
"""


def test_family_rules_of_the_text_parser() -> None:
    families = family_names(TGI)
    reference = whole(TGI_PAGE, families)
    # read by hand: the first sample is renamed, the one after the `_created` singleton is not
    assert [p.value for p in reference["tgi_request_success_total"]] == [5.0]
    assert [p.value for p in reference["tgi_request_success"]] == [6.0]
    assert [p.value for p in reference["tgi_queue_size"]] == [3.0]  # NaN carries no value
    assert [p.value for p in reference["tgi_request_failure_total"]] == [7.0]
    parser = ReParser(families)
    assert dict(parser.parse(TGI_PAGE).by_name) == reference
    # the same lines in another order parse differently: the memo must follow
    swapped = TGI_PAGE.replace("tgi_request_success 5\ntgi_request_success_created 1.7e9\ntgi_request_success 6",
                               "tgi_request_success_created 1.7e9\ntgi_request_success 6\ntgi_request_success 5")
    assert dict(parser.parse(swapped).by_name) == whole(swapped, families)
    assert dict(parser.parse(TGI_PAGE).by_name) == reference


# Comment lines in other forms than "# TYPE name" (the prefilter passes them to the loop) and sample
# names that begin like a family's without being one of its samples (it passes those too).
ODD_FORMS_PAGE = """\
#  TYPE tgi_queue_size gauge
tgi_queue_size 3
#\tTYPE tgi_request_success counter
tgi_request_success 5
# HELP  tgi_batch_current_size two spaces before the name
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 2
tgi_batch_current_size_of_something_else 9
# HELP
# TYPE
#TYPE tgi_request_failure counter
tgi_request_failure{err="validation"} 7
tgi_request_failure_total{err="other"} 1
 tgi_queue_size 4
tgi_queue_size_total 1
"""


@pytest.mark.parametrize("histograms", [False, True])
def test_comment_lines_in_other_forms_and_look_alike_names(histograms: bool) -> None:
    families = family_names(TGI)
    kept = families if histograms else families - histogram_names(TGI)
    parser = ReParser(families, histogram_names(TGI))
    assert dict(parser.parse(ODD_FORMS_PAGE, histograms=histograms).by_name) == whole(ODD_FORMS_PAGE, kept)
    # and with every line changed once, so that each is read again
    bumped = changed(ODD_FORMS_PAGE, seed=1, share=1.0)
    assert dict(parser.parse(bumped, histograms=histograms).by_name) == whole(bumped, kept)


def test_a_bad_line_fails_as_the_whole_parse_fails() -> None:
    families = family_names(VLLM)
    parser = ReParser(families)
    good = page("vllm-0.32.0-cpu-local-capture-idle.txt")
    parser.parse(good)
    running = next(line for line in good.splitlines() if line.startswith("vllm:num_requests_running{"))
    bad = good.replace(running, running.rsplit(" ", 1)[0] + " lots", 1)
    with pytest.raises(NotPrometheusText) as whole_error:
        whole(bad, families)
    with pytest.raises(NotPrometheusText) as re_error:
        parser.parse(bad)
    assert str(re_error.value) == str(whole_error.value)
    assert dict(parser.parse(good).by_name) == whole(good, families)  # and it recovers


def test_memory_is_bounded_by_one_page() -> None:
    families = family_names(VLLM)
    parser = ReParser(families)
    text = page("vllm-0.32.0-cpu-local-capture-after-load.txt")
    for seed in range(5):
        text = changed(text, seed, share=1.0)
        parser.parse(text)
    kept_lines = [line for line in keep_families(text, families).splitlines() if line and line[0] != "#"]
    assert len(parser._seen) == len(set(kept_lines))


def test_names_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_reparse, "MAX_NAMES", 50)
    parser = ReParser(family_names(VLLM))
    lines = [f"unrelated_metric_{i} {i}" for i in range(120)] + ["vllm:num_requests_running 4"]
    expo = parser.parse("\n".join(lines) + "\n")
    assert [p.value for p in expo.by_name["vllm:num_requests_running"]] == [4.0]
    assert len(parser._belongs) <= 50


@pytest.mark.parametrize("names", KINDS, ids=lambda k: k.kind)
def test_histograms_left_out_on_request(names) -> None:
    """A scrape between two histogram reads parses only gauges and counters; pages alternate here."""
    families, histograms = family_names(names), histogram_names(names)
    assert histograms <= families  # llama.cpp has none
    parser = ReParser(families, histograms)
    for capture in CAPTURES:
        text = page(capture)
        try:
            whole(text, families)
        except NotPrometheusText:
            continue
        for seed, with_histograms in enumerate((True, False, False, True, False)):
            text = changed(text, seed)
            expected = whole(text, families if with_histograms else families - histograms)
            assert dict(parser.parse(text, histograms=with_histograms).by_name) == expected, (capture, seed)


def test_histogram_lines_unchanged_since_their_last_reading_are_not_read_again(monkeypatch) -> None:
    """The scrapes between two histogram reads leave the histograms out; a bucket that did not change
    across them is remembered from the last read, not parsed again."""
    families, histograms = family_names(VLLM), histogram_names(VLLM)
    parser = ReParser(families, histograms)
    text = page("vllm-0.32.0-cpu-local-capture-after-load.txt")
    read: list[str] = []
    real = server_reparse._parse_lines
    monkeypatch.setattr(server_reparse, "_parse_lines", lambda keys: read.extend(k for k, _ in keys) or real(keys))
    parser.parse(text, histograms=True)
    lean = "\n".join(line.replace("vllm:num_requests_running{", "vllm:num_requests_running{x=\"1\",")
                     for line in text.splitlines()) + "\n"
    for _ in range(3):
        parser.parse(lean, histograms=False)
    read.clear()
    assert dict(parser.parse(text, histograms=True).by_name) == whole(text, families)
    assert read == []  # the buckets, and the gauge as it was then, all remembered


# The direct reading of plain lines: the same as prometheus_client's, or it leaves the line to it.

ODD_LINES = [
    'foo 5', 'foo{a="b"} 5', 'foo{a="b",c="d"} 5e3', 'foo{a="b",} 5', 'foo{a="b", c="d"} 5', 'foo {a="b"} 5',
    'foo{a="b"}  5', 'foo{a="b\\"x"} 5', 'foo{a="b\\\\"} 5', 'foo 5 1700000000000', 'foo NaN', 'foo +Inf',
    'foo -Inf', 'foo 1_0', 'foo{le="+Inf"} 3', 'foo{a="} 5"} 7', 'foo{a="b"} 5 } 6', 'foo{a="1",a="2"} 3',
    'foo{__name__="bar"} 1', 'foo{a="ü"} 0x10', 'foo{a="b"c="d"} 1', 'foo{a=b} 1', 'foo{} 4', 'foo 12345678901234567890',
]


def _lines_of_captures() -> list[str]:
    return [line for name in CAPTURES for line in page(name).splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("renamed", [False, True])
def test_plain_lines_read_as_prometheus_client_reads_them(renamed: bool) -> None:
    lines = _lines_of_captures() + ODD_LINES
    if renamed:  # ReParser renames only counter samples named as their family, without _total
        lines = [line for line in lines if not sample_name(line).endswith("_total")]
    simple = 0
    for line in lines:
        fast = server_reparse._read_simple(line, renamed)
        if fast is server_reparse._NOT_SIMPLE:
            continue
        simple += 1
        assert [fast] == server_reparse._parse_with_prometheus_client([(line, renamed)]), line
    assert simple >= 0.9 * len(lines)  # the direct path is the one taken


def test_odd_lines_are_left_to_prometheus_client() -> None:
    for line in ('foo{a="1",a="2"} 3', 'foo{a="b",} 5', 'foo{a="b", c="d"} 5', 'foo {a="b"} 5', 'foo{a="b\\"x"} 5',
                 'foo 5 1700000000000', 'foo 1_0', 'foo{__name__="bar"} 1', 'foo{a="b"} 5 } 6'):
        assert server_reparse._read_simple(line, False) is server_reparse._NOT_SIMPLE, line
    assert server_reparse._read_simple("foo NaN", False) is None  # a NaN carries no value, as before
