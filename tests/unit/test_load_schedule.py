"""Open-loop arrivals as vllm bench serve draws them, and the lists of loads on the command line."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from lpxtop.load.schedule import arrival_gaps, parse_levels


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_gaps_are_gamma_with_mean_one_over_rate_and_shape_burstiness(burstiness):
    rate = 8.0
    gaps = list(itertools.islice(arrival_gaps(rate, burstiness, seed=1), 20_000))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / rate, rel=0.03)
    # a gamma of shape k has a coefficient of variation 1/sqrt(k): 1 for Poisson, more for bursty traffic
    assert statistics.pstdev(gaps) / mean == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_the_same_seed_gives_the_same_arrivals():
    a = list(itertools.islice(arrival_gaps(3.0, 1.0, seed=7), 50))
    b = list(itertools.islice(arrival_gaps(3.0, 1.0, seed=7), 50))
    assert a == b


def test_levels():
    assert parse_levels("1, 5,10", integer=True, name="--concurrency") == (1.0, 5.0, 10.0)
    assert parse_levels("0.5,2", integer=False, name="--rate") == (0.5, 2.0)
    for bad, words in (("1,x", "not a number"), ("0", "greater than 0"), ("1.5", "whole number"),
                       ("2,2", "twice"), ("", "no --concurrency"), ("inf", "finite")):
        with pytest.raises(ValueError, match=words):
            parse_levels(bad, integer=True, name="--concurrency")
