"""The probe schedule against a load that runs in waves: fixed gaps lock onto the waves' phase, random
exponential gaps see the time average (PASTA). Ground truth from the simulated server's own record of
its waves."""

from __future__ import annotations

import math
import random
import statistics
import threading
import time
from bisect import bisect_left

import pytest

from lpxtop.engine.probe.schedule import CAP_SHARE, FLOOR_SHARE, next_gap
from lpxtop.engine.runner import Engine, EngineSettings
from lpxtop.model.probe import Sample
from lpxtop.sim.config import SimConfig
from lpxtop.sim.thread import start_sim_in_thread
from tests.support.sim import endpoint

pytestmark = pytest.mark.timing  # measures time against tolerances: runs alone under pytest-xdist

PROBES = 30
MEAN_GAP_S = 0.05
ALPHA = 1e-4  # the chance the test may fail on a correct schedule (DKW bound below)


def test_gaps_are_exponential_above_the_floor_below_the_cap_with_the_mean_kept():
    rng = random.Random(7)
    gaps = [next_gap(2.0, rng) for _ in range(40_000)]
    assert min(gaps) >= FLOOR_SHARE * 2.0 and max(gaps) <= CAP_SHARE * 2.0
    # the mean of 40,000 draws: standard error 0.9 * 2 / sqrt(40000) = 0.009 s; 5 of them allowed
    assert abs(statistics.fmean(gaps) - 2.0) < 0.045
    # memoryless above the floor: the share beyond floor + x is exp(-x / (mean - floor))
    beyond = sum(g > 0.2 + 1.8 for g in gaps) / len(gaps)
    assert abs(beyond - math.exp(-1.0)) < 0.02
    assert next_gap(2.0, rng, schedule="fixed") == 2.0
    assert next_gap(float("nan"), rng) == 0.0 and next_gap(0.0, rng) == 0.0
    with pytest.raises(ValueError):
        next_gap(1.0, rng, schedule="weekly")


def _probe_for(sim_url: str, schedule: str, out: dict) -> None:
    engine = Engine([endpoint(sim_url, name=schedule, model="m", max_tokens=4, interval_s=MEAN_GAP_S)],
                    EngineSettings(scrape_metrics=False, probe_schedule=schedule, seed=11,
                                   max_samples=PROBES, include_client_limited=True))
    samples: list[Sample] = []
    engine.add_listener(lambda e: samples.append(e.sample) if type(e).__name__ == "SampleEvent" else None)
    with engine:
        deadline = time.monotonic() + 30
        while len(samples) < PROBES and time.monotonic() < deadline:
            time.sleep(0.05)
    out[schedule] = samples[:PROBES]


def _truth(samples: list[Sample], waves) -> list[float]:
    """TTFT (ms) of a request sent at each moment the schedule could have sent one: every 0.25 ms of the
    run outside the probes' own spans (a probe in flight and the floor after it), from the waves."""
    admitted = [w.admitted_ns for w in waves if w.first_token_ns is not None]
    first = [w.first_token_ns for w in waves if w.first_token_ns is not None]
    busy = sorted((s.start_ns, s.start_ns + int((s.e2e_ms or 0) * 1e6) + int(FLOOR_SHARE * MEAN_GAP_S * 1e9))
                  for s in samples)
    values, t, step = [], samples[0].start_ns, 250_000
    end, i = samples[-1].start_ns, 0
    while t < end:
        while i < len(busy) and busy[i][1] < t:
            i += 1
        if not (i < len(busy) and busy[i][0] <= t):
            k = bisect_left(admitted, t)
            if k < len(admitted):
                values.append((first[k] - t) / 1e6)
        t += step
    return values


def _ks(measured: list[float], truth: list[float]) -> float:
    """Kolmogorov-Smirnov distance between the measured values and the truth's distribution."""
    truth = sorted(truth)
    worst = 0.0
    for i, x in enumerate(sorted(measured)):
        f = bisect_left(truth, x) / len(truth)
        worst = max(worst, abs(f - i / len(measured)), abs(f - (i + 1) / len(measured)))
    return worst


def test_fixed_gaps_lock_onto_waves_and_exponential_gaps_see_the_time_average():
    # 4 closed-loop clients of 40 tokens, admitted in waves of ~70 ms; each schedule probes with its
    # own engine, beside the other (slots for all, and batch size does not change a step's time, so
    # neither probe moves the waves).
    config = SimConfig(model="m", ttft_ms=10, itl_ms=1, max_num_seqs=8, wave_load=(4, 40), batch_factor=0.0,
                       jitter=0.02)
    out: dict[str, list[Sample]] = {}
    with start_sim_in_thread(config) as sim:
        threads = [threading.Thread(target=_probe_for, args=(sim.url, kind, out)) for kind in ("fixed", "poisson")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        waves = sim.server.scheduler.waves
    # Dvoretzky-Kiefer-Wolfowitz: n values drawn from a distribution F have an empirical distribution
    # within sqrt(ln(2/alpha) / 2n) of F everywhere, but for a chance alpha.
    bound = math.sqrt(math.log(2 / ALPHA) / (2 * PROBES))
    distances = {}
    for kind, samples in out.items():
        assert len(samples) == PROBES and all(s.ok for s in samples), kind
        truth = _truth(samples, waves)
        distances[kind] = (_ks([s.ttft_ms for s in samples], truth), statistics.median(truth),
                           statistics.median(s.ttft_ms for s in samples))
    assert distances["poisson"][0] < bound, distances
    assert distances["fixed"][0] > bound, distances
