"""The fleet view: many hosts' lpxtop exporters read back from Prometheus, as one dashboard.

Prometheus is the store and the distributed engine; lpxtop builds no collector of its own. No
Textual, no Rich here (tests/unit/test_layering.py).

- `promql.py`  every query, in one module (`lpxtop fleet --print-queries`)
- `client.py`  the Prometheus HTTP API client, bounded in time, bytes and series
- `build.py`   answers → Snapshot (EndpointViews with a host, GPUs, ports, alerts)
- `source.py`  `FleetSource`, the SnapshotSource the dashboard renders
(`lpxtop fleet`, the command line: lpxtop/cli/fleet.py)
"""
