"""When requests leave: open-loop arrivals as `vllm bench serve` draws them.

Closed loop (`--concurrency C`) needs no schedule: C workers each send their next request the moment the
previous one ends, so exactly C are in flight. Open loop (`--rate R`) draws the gaps between arrivals from
a gamma distribution with shape `burstiness` and mean 1/R, as vLLM's benchmark does
(`np.random.gamma(shape=burstiness, scale=1 / (rate * burstiness))`): burstiness 1 is a Poisson process,
below 1 burstier, above 1 more regular. Arrivals are placed on an absolute timeline (start + sum of gaps),
so a late wake-up of the sender does not slow the offered rate down.
"""

from __future__ import annotations

import random
from collections.abc import Iterator


def arrival_gaps(rate: float, burstiness: float = 1.0, seed: int | None = 0) -> Iterator[float]:
    """Seconds between consecutive arrivals (endless), mean 1/rate."""
    if rate <= 0:
        raise ValueError("the request rate must be greater than 0")
    if burstiness <= 0:
        raise ValueError("burstiness must be greater than 0")
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, theta)


def parse_levels(text: str, *, integer: bool, name: str) -> tuple[float, ...]:
    """A comma-separated list of positive loads ("1,5,10,20,50"); raises ValueError saying what is wrong."""
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"{name} {part!r} is not a number") from None
        if not value > 0 or value == float("inf"):
            raise ValueError(f"{name} {part!r} must be a finite number greater than 0")
        if integer:
            if value != int(value):
                raise ValueError(f"{name} {part!r} must be a whole number")
            value = float(int(value))
        values.append(value)
    if not values:
        raise ValueError(f"no {name} given")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} {text!r} lists a value twice")
    return tuple(values)
