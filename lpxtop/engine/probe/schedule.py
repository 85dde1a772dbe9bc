"""When the next probe leaves: random exponential gaps, so probes see the server's time averages.

A probe that leaves a fixed time after the previous one ended locks onto any rhythm the server has:
under a closed-loop load that is admitted in waves, every probe arrives at the same phase of a wave
and reports the TTFT of that phase (two identical runs gave a TTFT p50 of 100 ms and 1.16 s while the
load's own p50 stayed at ~60 ms). Arrivals of a Poisson process see time averages (PASTA): whatever
the server's rhythm, the share of probes that find it in a state is the share of time it spends in
that state.

The engine keeps one probe in flight per endpoint, so the clock is a Poisson clock whose ticks that
fall while the endpoint's probe is in flight are skipped. Because the exponential distribution has no
memory, that is the same as drawing the gap from the end of one probe to the start of the next from
an exponential distribution with the configured mean: probes sample the server's state over the time
no probe of lpxtop's is in it. So an endpoint is probed every `interval + probe duration` on average
(2.3 s for the default 2 s and a ~0.3-s probe).

Two bounds keep the gaps reasonable without moving their mean:

- a floor of `FLOOR_SHARE` × mean: the gap is `floor + X` with X exponential of mean `mean − floor`, so
  the mean stays `mean` exactly and no probe follows the previous one back to back; the floor is a
  dead time after each probe, which is then left out of the time that is sampled, like the probe itself;
- a cap of `CAP_SHARE` × mean: X is cut at `cap − floor`, which takes `(mean − floor)·e^(−(cap −
  floor)/(mean − floor))` off the mean: 0.9·e^−11 ≈ 0.0015 % of it. No endpoint waits more than ten
  means (plus its probe) for a probe.

The same function schedules the dashboard's probes, `once`'s probes and scrapes, and any other
reader that needs unbiased sampling (the exporter's probes).
"""

from __future__ import annotations

import random

FLOOR_SHARE = 0.1
CAP_SHARE = 10.0
SCHEDULES = ("poisson", "fixed")

_default_rng = random.Random()


def next_gap(mean_s: float, rng: random.Random | None = None, *, schedule: str = "poisson") -> float:
    """Seconds from the end of one probe to the start of the next, for a mean gap of `mean_s`.

    `schedule="fixed"` returns the mean itself: probes at fixed gaps, as lpxtop's first versions sent them (kept for
    comparisons and tests; it is biased under a rhythmic load).
    """
    if not mean_s > 0:  # also NaN
        return 0.0
    if schedule == "fixed":
        return mean_s
    if schedule != "poisson":
        raise ValueError(f"unknown probe schedule {schedule!r} (known: {', '.join(SCHEDULES)})")
    floor = FLOOR_SHARE * mean_s
    rest = (rng or _default_rng).expovariate(1.0 / (mean_s - floor))
    return floor + min(rest, (CAP_SHARE - FLOOR_SHARE) * mean_s)
