"""lpxtop's command line: one module per subcommand, and what they share.

- `entry`: the `lpxtop` command (`main`): the top-level help and each subcommand handed to its module;
- `dashboard` (the dashboard and `demo`), `once`, `load`, `record` (`record`, `replay`, `export`),
  `exporter`, `fleet`, `sim`: each with `build_parser(command)` and `run(command, args)`;
- `common`: argparse types, the endpoint, alert, display and recording flags, endpoints from the flags and
  the config file, the engine built from them; `otlp`: the OpenTelemetry flags and pipeline;
  `arguments`: the one kind of argparse parser; `assemble`: the engine with its real parts.

Only this package and lpxtop/ui import Textual (inside the functions that open the dashboard); the feature
packages (load, record, export, fleet, sim, otel) are headless.
"""
