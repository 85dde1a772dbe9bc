"""Helpers for the load-test tests: a plan against a simulated server, run to its end (bounded)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

from lpxtop.cli.load import build_load_engine
from lpxtop.load.controller import LoadController
from lpxtop.load.plan import LoadPlan
from lpxtop.load.server_window import ServerWatch
from lpxtop.model.endpoint import EndpointConfig


def target(url: str, **kw) -> EndpointConfig:
    values = {"name": "load", "url": url, "timeout_s": 10.0, "first_token_timeout_s": 5.0, "connect_timeout_s": 2.0,
              "metrics_interval_s": 0.5}
    values.update(kw)
    return EndpointConfig(**values)


def plan_for(url: str, *, endpoint: dict | None = None, **kw) -> LoadPlan:
    """A short plan: sub-second warm-ups and windows; the client limits relaxed (this shared 2-core box is
    busy: tests of something else must not turn on its load), except where a test sets them."""
    values = dict(endpoint=target(url, **(endpoint or {})), mode="concurrency", levels=(1.0,), output_tokens=16,
                  duration_s=1.0, warmup_s=0.3, lag_limit_ms=1000.0, cpu_wait_limit=1.0, warmup_requests=1)
    values.update(kw)
    return LoadPlan(**values)


@dataclass
class Run:
    controller: LoadController
    requests_jsonl: str

    @property
    def state(self):
        return self.controller.state()

    def lines(self) -> list[dict]:
        return [json.loads(line) for line in self.requests_jsonl.splitlines() if line.strip()]


def run_plan(plan: LoadPlan, *, timeout_s: float = 60.0, scrape: bool = True, on_mark=None,
             request_listener=None) -> Run:
    """Run `plan` with the engine beside it (scrapes only) and return once it ended (or fail after timeout_s)."""
    engine = build_load_engine(plan, ui=False, scrape=scrape)
    watch = ServerWatch(plan.endpoint.name, plan.endpoint.effective_metrics_url if scrape else None)
    engine.add_listener(watch.on_engine_event)
    out = io.StringIO()
    controller = LoadController(plan, server_watch=watch, requests_out=out)
    if on_mark is not None:
        controller.add_mark_listener(on_mark)
    if request_listener is not None:
        controller.add_request_listener(request_listener)
    engine.start()
    try:
        controller.start()
        finished = controller.wait(timeout_s)
        if not finished:
            controller.stop()
            controller.wait(10)
        assert finished, f"the load test did not end within {timeout_s} s: {controller.state().phase}"
    finally:
        engine.stop()
    return Run(controller, out.getvalue())
