"""The machine lpxtop runs on: host figures, listening ports, inference-server processes.

- `host`: CPU, memory, load.
- `ports`: who listens on the endpoints' ports, and what is left over.
- `patterns`: the inference servers known by their processes, the program line, ports on a command line.
- `processes`: the process scan and the process tree.
- `listeners`: listening TCP sockets and their owners; which host names are this machine.
- `shown`: what is shown of a process: command lines with secrets masked and paths shortened, ages, sizes.
- `discovery`: inference servers found on this host without configuration.
- `actions`: what the user may do to a process (signal it), checked.

The names below are imported on first use (lpxtop/lazy.py).
"""

from lpxtop.lazy import lazy_exports

__all__ = [
    "HostCollector",
    "PortMonitor",
    "discover",
    "discover_sync",
    "display_command",
    "redact_argv",
    "safe_name",
    "short_command",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.system.host": ("HostCollector",),
    "lpxtop.engine.system.ports": ("PortMonitor",),
    "lpxtop.engine.system.discovery": ("discover", "discover_sync"),
    "lpxtop.engine.system.shown": ("display_command", "redact_argv", "safe_name", "short_command"),
})
