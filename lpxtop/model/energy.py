"""Energy per output token for one endpoint (owned by engine/gpu/accel/energy.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def _r(x: float | None, digits: int) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


@dataclass(frozen=True)
class EndpointEnergy:
    """Joules per output token of the GPUs serving an endpoint, over the last `span_s` seconds.

    `energy_j` is the growth of those GPUs' energy counters (or, for a GPU without one, its power readings
    integrated) and `output_tokens` the growth of the server's generated-token counter, both over the
    same interval. `gpus` names the devices counted ("gpu0", ...); `basis` says how they were chosen:
    "processes" (the endpoint's server processes hold them), "only_endpoint" (the host's one endpoint gets
    every GPU, since none could be tied to it). When GPUs serve several endpoints, `shared_with` names the
    others and the figure divides the GPUs' energy by all their tokens together. `source` is "counter",
    "power" (integrated readings, an estimate) or "counter+power". None figures come with a `reason`.
    """

    joules_per_output_token: float | None = None
    energy_j: float | None = None
    output_tokens: float | None = None
    span_s: float | None = None
    mean_power_w: float | None = None
    gpus: tuple[str, ...] = ()
    basis: str | None = None  # processes | only_endpoint
    shared_with: tuple[str, ...] = ()
    source: str | None = None  # counter | power | counter+power
    reason: str | None = None

    def to_json(self) -> dict:
        return {
            "joules_per_output_token": _r(self.joules_per_output_token, 4),
            "energy_j": _r(self.energy_j, 3),
            "output_tokens": _r(self.output_tokens, 1),
            "span_s": _r(self.span_s, 2),
            "mean_power_w": _r(self.mean_power_w, 1),
            "gpus": list(self.gpus),
            "basis": self.basis,
            "shared_with": list(self.shared_with),
            "source": self.source,
            "reason": self.reason,
        }
