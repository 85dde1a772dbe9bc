"""Scripts that print figures (run each from the repository root: `python benchmarks/NAME.py --help`)."""
