"""The rhythm figures of a step's sends (lpxtop/load/rhythm.py), on send times made by hand."""

from __future__ import annotations

import random

import pytest

from lpxtop.load.rhythm import dispersion, rhythm_of, synchrony
from lpxtop.model.load import Rhythm

MS = 1_000_000


def rounds(workers: int, count: int, period_ms: float, spread_ms: float) -> list[int]:
    """`count` rounds of `workers` sends, one round every `period_ms`, each spread evenly over `spread_ms`."""
    return [int((r * period_ms + w * spread_ms / max(1, workers - 1)) * MS) for r in range(count) for w in range(workers)]


def test_rounds_sent_within_the_window_are_fully_synchronised():
    sends = rounds(100, 4, 8000, 45)
    assert synchrony(sends, 100) == pytest.approx(1.0)
    assert dispersion(sends) > 50  # all of a round in one or two 50-ms bins, then nothing for 8 s


def test_a_round_spread_over_twice_the_window_is_about_three_quarters_synchronised():
    # each send sees the others within 50 ms of it: on average 3/4 of a round spread evenly over 100 ms
    assert synchrony(rounds(101, 3, 5000, 100), 101) == pytest.approx(0.75, abs=0.01)


def test_sends_spread_evenly_over_a_request_are_not_synchronised():
    # 100 workers, each request 8 s, sends evenly spaced: 80 ms apart, none within 50 ms of another
    sends = [int(i * 80 * MS) for i in range(400)]
    assert synchrony(sends, 100) == 0.0
    assert dispersion(sends) < 1.0  # more even than random


def test_independent_arrivals_have_a_dispersion_near_one():
    rng = random.Random(3)
    t, sends = 0.0, []
    for _ in range(20_000):
        t += rng.expovariate(10.0)  # 10 per second: 0.5 per 50-ms bin
        sends.append(int(t * 1e9))
    assert dispersion(sends) == pytest.approx(1.0, abs=0.05)


def test_a_worker_is_never_counted_twice_and_small_samples_have_no_figure():
    # 2 workers whose requests take 10 ms: each send has many near it, but at most the one other worker
    assert synchrony([int(i * 10 * MS) for i in range(50)], 2) == 1.0
    assert synchrony([0], 10) is None and synchrony([0, 1], 1) is None
    assert dispersion([5]) is None and dispersion([0, 10 * MS]) is None  # one bin


def test_the_step_json_says_which_schedule_ran_and_how_synchronised_it_was():
    together = rhythm_of(rounds(10, 3, 2000, 5), schedule="together", workers=10)
    assert together.to_json() == {"schedule": "together", "ttft_from": "sent", "window_ms": 50.0, "synchrony": 1.0,
                                  "dispersion": together.to_json()["dispersion"], "sends": 30}
    assert together.describe() == "rounds 1.00"
    arrivals = rhythm_of([int(i * 100 * MS) for i in range(10)], schedule="arrivals", workers=None)
    assert arrivals.synchrony is None and arrivals.describe().startswith("disp ")
    assert Rhythm("staggered", synchrony=0.04).describe() == "spread 0.04"
