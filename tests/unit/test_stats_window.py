"""The endpoint window's summary: its incrementally sorted percentiles equal a from-scratch computation."""

from __future__ import annotations

import itertools
import random

from lpxtop.engine.window import EndpointWindow
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Percentiles, Sample

CONFIG = EndpointConfig(name="e", url="http://127.0.0.1:1/v1")


def make_sample(rng: random.Random, wall_time: float) -> Sample:
    if rng.random() < 0.15:
        return Sample(endpoint="e", wall_time=wall_time, start_ns=0, ok=False, error_kind="read_timeout")
    n = rng.randint(1, 40)
    ttft = rng.choice([rng.uniform(5, 900), 100.0])  # repeated values too: removal must take just one
    stamps = tuple(itertools.accumulate([ttft] + [rng.choice([rng.uniform(0.5, 40), 10.0]) for _ in range(n - 1)]))
    approx = rng.random() < 0.2
    return Sample(
        endpoint="e", wall_time=wall_time, start_ns=0, ok=True, ttft_ms=ttft, e2e_ms=stamps[-1],
        token_event_ms=stamps, tokens_per_event=(1,) * n, output_tokens=n, output_tokens_approx=approx,
    )


def brute_force(samples: list[Sample]) -> dict[str, Percentiles | None | bool]:
    good = [s for s in samples if s.ok]

    def of(values):
        return Percentiles.of([float(v) for v in values if v is not None])

    return {
        "ttft_ms": of(s.ttft_ms for s in good),
        "itl_ms": of(g for s in good for g in s.itl_ms),
        "tpot_ms": of(s.tpot_ms for s in good),
        "e2e_ms": of(s.e2e_ms for s in good),
        "output_tokens_per_s": of(s.decode_tokens_per_s for s in good),
        "output_tokens": of(s.output_tokens for s in good),
        "output_tokens_approx": any(s.output_tokens_approx for s in good),
    }


def summary(window: EndpointWindow, now: float) -> dict[str, Percentiles | None | bool]:
    view = window.view(CONFIG, now=now, model=None, server=None, server_kind="vllm")
    return {key: getattr(view, key) for key in brute_force([])}


def test_incremental_percentiles_equal_recomputed_ones_through_adds_prunes_overflow_and_reset():
    rng = random.Random(7)
    window = EndpointWindow(window_s=60.0, max_samples=25)  # both limits get hit
    now = 1000.0
    for step in range(400):
        now += rng.choice([0.5, 2.0, 7.0])
        window.add(make_sample(rng, now))
        if step % 3 == 0:
            now += rng.choice([0.0, 30.0])  # views later than the last sample prune by time
            expected = brute_force([s for s in window.samples if s.wall_time >= now - 60.0])
            assert summary(window, now) == expected, step
            assert len(window.samples) <= 25
        if step == 200:
            window.reset()
            assert summary(window, now) == brute_force([])


def test_an_empty_or_failing_window_has_no_percentiles():
    window = EndpointWindow()
    assert summary(window, 0.0)["ttft_ms"] is None
    window.add(Sample(endpoint="e", wall_time=1.0, start_ns=0, ok=False, error_kind="refused"))
    view = window.view(CONFIG, now=1.0, model=None, server=None, server_kind="vllm")
    assert view.ttft_ms is None and view.itl_ms is None and view.status == "down"
    assert view.probes_failed == 1 and view.errors == {"refused": 1}


def test_the_summary_is_kept_until_a_sample_comes_or_goes():
    rng = random.Random(1)
    window = EndpointWindow(window_s=60.0)
    window.add(make_sample(rng, 100.0))
    first = window.view(CONFIG, now=100.0, model=None, server=None, server_kind="vllm")
    again = window.view(CONFIG, now=101.0, model="m", server=None, server_kind="vllm", in_flight=True)
    assert again.ttft_ms is first.ttft_ms and again.samples is first.samples
    assert again.model == "m" and again.in_flight
    window.add(make_sample(rng, 102.0))
    later = window.view(CONFIG, now=102.0, model=None, server=None, server_kind="vllm")
    assert len(later.samples) == 2
    pruned = window.view(CONFIG, now=161.0, model=None, server=None, server_kind="vllm")
    assert len(pruned.samples) == 1


def _ok(wall_time: float, ttft: float, **kw) -> Sample:
    kw.setdefault("output_tokens", 3)
    return Sample(endpoint="e", wall_time=wall_time, start_ns=0, ok=True, ttft_ms=ttft, e2e_ms=ttft + 30,
                  token_event_ms=(ttft, ttft + 10, ttft + 30), tokens_per_event=(1, 1, 1), **kw)


def test_client_limited_probes_are_counted_and_left_out_of_the_percentiles_unless_asked():
    for include in (False, True):
        window = EndpointWindow(include_client_limited=include)
        window.add(_ok(1.0, 50.0))
        window.add(_ok(2.0, 900.0, client_limited=True))
        view = window.view(CONFIG, now=3.0, model="m", server=None, server_kind="vllm")
        assert view.probes_sent == 2 and view.probes_client_limited == 1
        assert view.to_json()["probes"]["client_limited"] == 1
        assert view.ttft_ms.count == (2 if include else 1) and view.ttft_ms.max == (900.0 if include else 50.0)
        assert view.percentiles_with_client_limited == include
        window.add(_ok(400.0, 60.0))  # the limited one leaves the window: taken out only where it was put in
        view = window.view(CONFIG, now=400.0, model="m", server=None, server_kind="vllm")
        assert view.ttft_ms.count == 1 and view.ttft_ms.p50 == 60.0


def test_with_only_client_limited_probes_the_percentiles_come_from_them_marked():
    window = EndpointWindow()
    window.add(_ok(1.0, 900.0, client_limited=True))
    view = window.view(CONFIG, now=2.0, model="m", server=None, server_kind="vllm")
    assert view.ttft_ms.p50 == 900.0 and view.percentiles_with_client_limited
    assert view.to_json()["latency_includes_client_limited"] is True
    window.add(_ok(3.0, 50.0))  # a clean probe comes: the limited one is left out again
    view = window.view(CONFIG, now=4.0, model="m", server=None, server_kind="vllm")
    assert view.ttft_ms.count == 1 and view.ttft_ms.p50 == 50.0 and not view.percentiles_with_client_limited


def test_a_sample_whose_numbers_do_not_fit_a_float_is_left_out_not_raised():
    window = EndpointWindow()
    huge = _ok(1.0, 50.0, output_tokens=10**400)  # TPOT and the decode rate would raise OverflowError
    window.add(huge)
    window.add(_ok(2.0, float("inf")))
    window.add(_ok(3.0, 70.0))
    view = window.view(CONFIG, now=4.0, model="m", server=None, server_kind="vllm")
    assert view.probes_ok == 3 and view.ttft_ms.count == 2 and view.ttft_ms.max == 70.0
    assert view.output_tokens.count == 2 and view.tpot_ms.count == 1
    for s in list(window.samples):  # and they leave the window without a trace
        window._count(s, insert=False)
    assert all(len(values) == 0 for values in window._sorted.values())
