"""Reading inference servers' own `/metrics`.

- `kinds`: which server answers at an endpoint (vLLM, SGLang, TGI, llama.cpp, Triton, LMDeploy, Ollama) and how
  it is addressed.
- `metric_names`: each server's metric names for queue, running, KV cache, preemptions and latency histograms.
- `exposition`: the Prometheus text exposition, parsed; `reparse`: the fast re-parser for pages seen before.
- `histograms`: server histograms, their deltas and quantiles over a window.
- `tracker`: one endpoint's server figures over time; `servers`: the scrape loop's collector.
- `ollama`: Ollama's `/api/ps`, which stands in for a `/metrics` page.

The names below are imported on first use (lpxtop/lazy.py).
"""

from lpxtop.lazy import lazy_exports

__all__ = [
    "BY_KIND",
    "Exposition",
    "KINDS",
    "KindNames",
    "MetricsTracker",
    "NotPrometheusText",
    "Ref",
    "ServerScraper",
    "detect_kind",
    "family_names",
    "keep_families",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    "lpxtop.engine.scrape.servers": ("ServerScraper",),
    "lpxtop.engine.scrape.kinds": ("detect_kind",),
    "lpxtop.engine.scrape.metric_names": ("KINDS", "KindNames", "family_names", "Ref", "BY_KIND", "keep_families"),
    "lpxtop.engine.scrape.exposition": ("Exposition", "NotPrometheusText"),
    "lpxtop.engine.scrape.tracker": ("MetricsTracker",),
})
