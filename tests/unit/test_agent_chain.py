"""The chain budget: quantiles of the sum of N steps drawn from the window's own samples, against brute force."""

from __future__ import annotations

import itertools
import random

import pytest

from lpxtop.engine.agent.chain import chain_budget, chain_sums
from lpxtop.model.probe import quantile_sorted


def brute_force(values: list[float], steps: int) -> list[float]:
    """Every one of the k^N equally likely chains, summed and sorted."""
    return sorted(sum(c) for c in itertools.product(values, repeat=steps))


def test_small_window_is_enumerated_exactly():
    values = [100.0, 120.0, 150.0, 900.0]  # one slow step in four
    budget = chain_budget(values, 5)
    truth = brute_force(values, 5)
    assert budget.exact and budget.draws == 4**5
    assert budget.p50_ms == pytest.approx(quantile_sorted(truth, 0.5))
    assert budget.p95_ms == pytest.approx(quantile_sorted(truth, 0.95))


def test_monte_carlo_agrees_with_brute_force_on_a_known_distribution():
    # 12 samples of a skewed step time (log-normal-ish): 12^4 = 20,736 chains, more than the exact limit.
    rng = random.Random(7)
    values = [round(80 * rng.lognormvariate(0, 0.6), 1) for _ in range(12)]
    truth = brute_force(values, 4)
    budget = chain_budget(values, 4)
    assert not budget.exact and budget.draws == 4000
    # Monte Carlo with 4,000 sums: the estimate's rank is within ~±0.7 points of the quantile (2 s.e.);
    # allow 1.5 points either side, in the brute-force distribution's own terms.
    for q, estimate in ((0.50, budget.p50_ms), (0.95, budget.p95_ms)):
        low, high = quantile_sorted(truth, q - 0.015), quantile_sorted(truth, q + 0.015)
        assert low <= estimate <= high, (q, low, estimate, high)


def test_the_p95_of_a_chain_is_not_n_times_the_p95():
    values = [100.0] * 18 + [1000.0] * 2  # p95 of one step: 1000 ms (10 % slow steps)
    budget = chain_budget(values, 5)
    one_p95 = quantile_sorted(sorted(values), 0.95)
    assert budget.p95_ms < 5 * one_p95 * 0.6  # 5 × p95 would say 5 s; a chain rarely has 3 slow steps
    assert budget.p50_ms == pytest.approx(500.0)


def test_a_rare_slow_step_puts_the_chain_p95_above_n_times_the_p95():
    values = [100.0] * 29 + [1000.0]  # 1 slow step in 30: under each step's p95, but 16 % of 5-step chains
    budget = chain_budget(values, 5)
    assert quantile_sorted(sorted(values), 0.95) == 100.0
    assert budget.p95_ms == pytest.approx(1400.0)  # four ordinary steps and the slow one
    assert budget.p95_ms > 5 * 100.0


def test_same_window_same_figures():
    values = [float(v) for v in range(50, 350, 3)]
    assert chain_budget(values, 5) == chain_budget(list(values), 5)


def test_edges():
    assert chain_budget([], 5) is None
    one = chain_budget([42.0], 5)
    assert one.p50_ms == one.p95_ms == pytest.approx(210.0)
    assert chain_budget([10.0, 20.0], 1).p50_ms == pytest.approx(15.0)
    assert chain_budget([10.0], 10_000).steps == 50  # bounded
    sums, exact = chain_sums([1.0, 2.0], 3)
    assert exact and sums == brute_force([1.0, 2.0], 3)


def test_full_window_is_cheap_enough():
    # 300 samples, N = 5: bounded work (4,000 sums of 5 draws), whatever the window holds.
    values = [float(v) for v in range(300)]
    budget = chain_budget(values, 5)
    assert budget.draws == 4000 and 0 < budget.p50_ms < budget.p95_ms < 5 * 299
