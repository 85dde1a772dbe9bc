"""Prometheus histogram arithmetic: bucket deltas between scrapes, merging, and quantiles.

Buckets are cumulative ``(upper_bound, count)`` pairs sorted by bound, the last one ``+Inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

Buckets = tuple[tuple[float, float], ...]


def bucket_delta(new: Buckets, old: Buckets | None) -> Buckets | None:
    """Observations made between two scrapes of one series; None if the layouts differ or a count fell.

    A series absent from the older scrape started from zero, so its delta is the whole of it.
    """
    if old is None:
        return new
    if [b for b, _ in new] != [b for b, _ in old]:
        return None
    out = []
    for (bound, n), (_, o) in zip(new, old):
        if n < o:
            return None  # a reset; the caller has already noticed it
        out.append((bound, n - o))
    return tuple(out)


def merge(series: Iterable[Buckets]) -> Buckets | None:
    """Sum several series bucket by bucket (like PromQL ``sum by (le)``); only bounds all share count."""
    series = [s for s in series if s]
    if not series:
        return None
    common = set.intersection(*({b for b, _ in s} for s in series))
    totals: dict[float, float] = dict.fromkeys(common, 0.0)
    for s in series:
        for bound, n in s:
            if bound in totals:
                totals[bound] += n
    return tuple(sorted(totals.items()))


def observations(buckets: Buckets | None) -> float:
    """Number of observations: the ``+Inf`` bucket's count (0 for none)."""
    if not buckets or not math.isinf(buckets[-1][0]):
        return 0.0
    return buckets[-1][1]


def histogram_quantile(q: float, buckets: Buckets | None) -> float | None:
    """The q-quantile of cumulative buckets, as Prometheus' ``histogram_quantile`` computes it.

    Linear interpolation inside the bucket the rank falls in; the lowest bucket starts at 0
    (or is its bound if that is <= 0); a rank in the ``+Inf`` bucket answers the highest finite
    bound. None when there are no observations or no ``+Inf`` bucket.
    """
    if not buckets or not 0.0 <= q <= 1.0 or not math.isinf(buckets[-1][0]):
        return None
    bounds, counts = _monotonic(buckets)
    total = counts[-1]
    if total <= 0 or len(bounds) < 2:
        return None
    rank = q * total
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if i == len(bounds) - 1:
        return bounds[-2]
    if i == 0 and bounds[0] <= 0:
        return bounds[0]
    lower = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else counts[i - 1]
    in_bucket = counts[i] - below
    if in_bucket <= 0:
        return bounds[i]
    return lower + (bounds[i] - lower) * (rank - below) / in_bucket


def _monotonic(buckets: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    # Scrapes are not atomic: a bucket may read a hair lower than the one before it. Prometheus
    # clamps such counts up to keep the cumulative series monotonic; so do we.
    bounds: list[float] = []
    counts: list[float] = []
    top = 0.0
    for bound, n in buckets:
        top = max(top, n)
        bounds.append(bound)
        counts.append(top)
    return bounds, counts
