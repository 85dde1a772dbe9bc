"""The machine lpxtop runs on: host figures, listening ports, inference-server processes.

- `host`: CPU, memory, load.
- `ports`: who listens on the endpoints' ports, and what is left over.
- `procinfo`: server process patterns, the process and socket scans, the commands shown.
- `discovery`: inference servers found on this host without configuration.
- `actions`: what the user may do to a process (signal it), checked.
"""
