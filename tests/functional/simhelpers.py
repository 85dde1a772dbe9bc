"""Helpers for tests that run the simulated server on loopback."""

from __future__ import annotations

import socket
import time

from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample, quantile_sorted
from lpxtop.sim.records import token_times_ns


def endpoint(url: str, **kw) -> EndpointConfig:
    values = {"name": "sim", "url": url, "max_tokens": 16, "timeout_s": 10.0, "first_token_timeout_s": 5.0,
              "connect_timeout_s": 2.0}
    values.update(kw)
    return EndpointConfig(**values)


def fidelity_errors(samples: list[Sample], server) -> tuple[list[float], list[float]]:
    """Measured minus true TTFT and ITL (ms), matching each sample to the sim's record by response id."""
    ttft_err: list[float] = []
    itl_err: list[float] = []
    for s in samples:
        record = server.record_for(s.response_id)
        assert record is not None, f"no record for {s.response_id}"
        truth = token_times_ns(record.events)
        assert len(truth) == len(s.token_event_ms), (len(truth), len(s.token_event_ms))
        ttft_err.append(s.ttft_ms - (truth[0] - s.start_ns) / 1e6)
        true_gaps = [(b - a) / 1e6 for a, b in zip(truth, truth[1:])]
        itl_err += [m - t for m, t in zip(s.itl_ms, true_gaps)]
    return ttft_err, itl_err


def p(values: list[float], q: float) -> float:
    return quantile_sorted(sorted(values), q)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 10.0, step: float = 0.05):
    """`predicate()`'s first true value, asked every `step` s; fails the test after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")
