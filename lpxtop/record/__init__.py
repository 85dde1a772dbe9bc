"""Recording, replay, compare and export (docs/recording.md): what the engine measured, kept in a SQLite file.

Inputs are recorded, not screens: every probe sample, normalized scrape, GPU/host/port reading, alert
change and mark (load step, bookmark), in the order the engine's loop produced them. Replay feeds them
through the live statistics code (`lpxtop.engine.window.EndpointWindow`), so a replayed percentile is
the live one by construction.

Modules: `codec` (dataclasses to compact JSON and back, tolerant of added and removed fields),
`store` (the file: schema, versions, chunks, damage), `fileformat` (its version and header check, without sqlite3), `recorder` (the engine listener and its writer
thread), `retention` (age and size limits), `replay` (the SnapshotSource over a file, with a timeline),
`compare`, `export`, `timeparse` (the `record`, `replay` and `export` commands: lpxtop/cli/record.py).
Nothing here imports Textual or Rich.
"""
