"""The Textual interface: `create_app(source, ...)` in app.py renders the snapshots a SnapshotSource publishes."""
