"""`python -m lpxtop.sim --port P`: run the simulated server as its own process."""

from lpxtop.sim.cli import main

raise SystemExit(main())
