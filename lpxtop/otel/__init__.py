"""lpxtop as an OpenTelemetry source: every probe, agent step and (sampled) load-test request sent as
GenAI-convention metrics and traces over OTLP/HTTP protobuf to any backend (a Collector, Jaeger, Tempo).

Nothing here runs on the probe loop: the engine's listener (and the load generator's) only appends to a
bounded queue; a worker thread of its own turns what was measured into metric points and spans and
exports them. A backend that is down, slow or refusing costs queued items, counted, never a probe's time.
The OpenTelemetry packages (`pip install 'lpxtop[otel]'`) are imported only when `--otlp` is given: they
would cost every dashboard ~0.8 s of start-up on the project's 2-core box (docs/opentelemetry.md). No
Textual, no Rich.

- `settings.py`  `--otlp URL`, the `[otlp]` table and the standard OTEL_* variables (no OpenTelemetry import)
- `semconv.py`   the conventions' names, units, bucket bounds and attribute keys, in both naming modes
- `aggregate.py` the cumulative histograms and counters (the SDK's per-record cost is ~20× this one's)
- `spans.py`     a probe, an agent step, a load request as spans whose ids are the request's traceparent
- `measures.py`  what one probe, step or request adds to the metrics; lpxtop's own gauges from a snapshot
- `pipeline.py`  the listener, the worker thread, the exporters, the counts that say what was lost
(the flags of every command that measures, and starting/stopping the pipeline: lpxtop/cli/otlp.py)
"""
