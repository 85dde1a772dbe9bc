"""lpxtop's own pool wait and the server's redirect, kept with each probe:
summarized in the endpoint's view, in `once --json` (schema 1 grows) and on the detail screen's Settings tab."""

from __future__ import annotations

import json

from rich.style import Style

from lpxtop.engine.window import EndpointWindow
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import Sample
from lpxtop.ui.palette import Palette
from lpxtop.ui.screens.detail import render_summary, settings_text

CONFIG = EndpointConfig(name="gw", url="http://127.0.0.1:9/v1")


def sample(t: float, wait: float | None, redirected: str | None = None) -> Sample:
    return Sample(endpoint="gw", wall_time=t, start_ns=0, ok=True, ttft_ms=10.0, e2e_ms=20.0,
                  token_event_ms=(10.0, 20.0), output_tokens=2, pool_wait_ms=wait, redirected_to=redirected)


def view_of(samples):
    window = EndpointWindow(300.0, 300)
    for s in samples:
        window.add(s)
    return window.view(CONFIG, now=samples[-1].wall_time, model="m", server=None, server_kind="vllm")


def test_the_view_and_once_json_carry_the_pool_wait_and_the_redirect():
    target = "https://gw.example/v1/chat/completions"
    view = view_of([sample(1.0, 0.0), sample(2.0, 0.0), sample(3.0, 40.0, target), sample(4.0, None)])
    probes = json.loads(json.dumps(view.to_json()))["probes"]
    assert probes["pool_wait_ms"] == {"p50": 0.0, "p95": 36.0, "p99": 39.2, "mean": 13.333, "max": 40.0}
    assert probes["redirected_to"] == target
    quiet = view_of([sample(1.0, 0.0)]).to_json()["probes"]
    assert quiet["pool_wait_ms"]["max"] == 0.0 and quiet["redirected_to"] is None
    assert view_of([sample(1.0, None)]).to_json()["probes"]["pool_wait_ms"] is None  # no probe got a slot


def test_the_settings_tab_says_what_lpxtop_waited_and_where_probes_go():
    target = "https://gw.example/v1/chat/completions"
    view = view_of([sample(1.0, 0.0), sample(2.0, 12.5, target)])
    text = settings_text(view)
    assert "lpxtop's own pool wait p99 12.4 ms, max 12.5 ms over 2 probes" in text
    assert f"redirected to          {target}" in text
    assert "redirected" not in settings_text(view_of([sample(1.0, 0.0)]))
    render_summary(view, "gw", 2.0, Palette(ok=Style(), warning=Style(), critical=Style(), muted=Style(), accent=Style(), chart=((1, 2, 3),)))  # the summary still renders with them
