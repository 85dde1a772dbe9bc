"""The engine: everything lpxtop measures, on a thread and event loop of its own; it never imports Textual.

Its wings, each a package whose `__init__` says what it holds and exports its public names:
`probe/` (the one measured stream, what each API's stream means, the schedule, lpxtop's own lateness),
`agent/` (the agent-step probe), `scrape/` (servers' own /metrics), `system/` (host, ports, processes,
listeners, discovery, actions), `gpu/` (accelerators), `traces/` (OpenTelemetry spans in).

The top level:
- `runner.py`: `Engine`, the supervisor: its thread and loop, commands, publishing snapshots; `EngineSettings`;
- `endpoints.py`: one endpoint's state and its probe, agent-step and scrape loops;
- `model_resolution.py`: the model a probe sends, and the models the endpoint serves;
- `collectors.py`: the GPU, host-and-ports and discovery loops;
- `once.py`: `Engine.collect_once`, for `lpxtop once`;
- `window.py`: `EndpointWindow` (an endpoint's last probes and their summary) and `Tally` (outcome counts);
- `alerts.py`: the alert rules and thresholds; `diagnosis.py`: what a failure means and what to do;
- `source.py`: `SnapshotSource` and `Capabilities`, what the screens may ask of a source.

The names below are imported on first use (lpxtop/lazy.py): importing one module of the engine costs no more.
"""

from lpxtop.lazy import lazy_exports

__all__ = [
    "AlertRules",
    "AlertThresholds",
    "Capabilities",
    "DEFAULT_MAX_SAMPLES",
    "DEFAULT_WINDOW_S",
    "EndpointWindow",
    "Engine",
    "EngineSettings",
    "LoadTest",
    "PUBLISH_EVERY_S",
    "Recorder",
    "SnapshotSource",
    "THRESHOLD_FLAGS",
    "Tally",
    "Timeline",
    "explain",
    "no_model_listed",
    "server_kind",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.runner": ("Engine", "EngineSettings", "PUBLISH_EVERY_S"),
    "lpxtop.engine.window": ("DEFAULT_MAX_SAMPLES", "DEFAULT_WINDOW_S", "EndpointWindow", "Tally", "server_kind"),
    "lpxtop.engine.alerts": ("AlertRules", "AlertThresholds", "THRESHOLD_FLAGS"),
    "lpxtop.engine.diagnosis": ("explain", "no_model_listed"),
    "lpxtop.engine.source": ("Capabilities", "SnapshotSource", "Recorder", "LoadTest", "Timeline"),
})
