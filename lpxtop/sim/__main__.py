"""`python -m lpxtop.sim --port P`: run the simulated server as its own process."""

from lpxtop.cli.sim import main

raise SystemExit(main())
