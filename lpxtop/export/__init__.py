"""lpxtop as a Prometheus exporter: the engine's measurements in the Prometheus text format.

The exporter reads what the engine publishes (snapshots, and each probe's `SampleEvent` for the
histograms) and adds no work on the probe loop: the engine's listener only appends to a bounded
queue; the histograms are filled and the families built when Prometheus scrapes, on the exporter's
own HTTP threads. No Textual, no Rich (tests/unit/test_layering.py).

- `settings.py`   the `[exporter]` table, bucket edges, the listen address
- `families.py`   every exported family, one line each
- `state.py`      the listener, the per-endpoint histograms and counters, the endpoints' labels
- `collector.py`  the prometheus_client collector that turns state and snapshot into families
- `probe.py`      blackbox-style `/probe?target=` (one probe when scraped, within the scrape timeout)
- `server.py`     the HTTP server: `/metrics`, `/probe`, `/`
(`lpxtop exporter`, the command line: lpxtop/cli/exporter.py)
"""
