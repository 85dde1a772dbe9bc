"""`lpxtop load`: run a load test against an OpenAI-compatible endpoint, sweep concurrency, request rate or
prompt length, judge each step against an SLO and search for the capacity, watched live in the dashboard.

Headless: nothing in this package imports Textual or Rich (the UI lives in lpxtop/ui, the
command line in lpxtop/cli/load.py).
"""
