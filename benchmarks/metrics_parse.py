"""What reading one /metrics page costs: ReParser (the fast path) against prometheus_client alone.

Pages come from the simulator's own exporter (lpxtop/sim/metrics.py: vLLM 0.32's families, HELP lines,
labels and buckets), with requests observed between two renders as a busy server's would be, so about
as many lines change from page to page as on a real one under load. For each page it times, in this
process:

  ReParser                    the scraper's path: the vLLM families' lines, new lines only
  ReParser, no histograms     the scrapes between two histogram reads (every 10 s)
  prometheus_client, kept     prometheus_client over the same lines (keep_families): the reference
  prometheus_client, whole    prometheus_client over the whole page, as before the kind is known
  MetricsTracker.update       the normalizer after the parse: rates, window means and bounded quantiles

usage: python benchmarks/metrics_parse.py [--pages 200] [--requests-per-page 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from lpxtop.engine.scrape.exposition import Exposition
from lpxtop.engine.scrape.metric_names import VLLM, family_names, histogram_names, keep_families
from lpxtop.engine.scrape.reparse import ReParser
from lpxtop.engine.scrape.tracker import MetricsTracker
from lpxtop.sim.metrics import SimMetrics


def pages(count: int, per_page: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    metrics = SimMetrics("sim-llama", max_model_len=4096, kv_tokens=65536)
    out = []
    for _ in range(count):
        for _ in range(per_page):
            ttft = rng.lognormvariate(-3.0, 0.8)
            metrics.h_ttft.observe(ttft)
            metrics.h_queue.observe(rng.expovariate(50.0))
            metrics.h_prefill.observe(ttft * 0.8)
            for _ in range(16):
                metrics.h_itl.observe(rng.lognormvariate(-4.0, 0.3))
            metrics.h_e2e.observe(ttft + 0.3)
            metrics.h_tpot.observe(0.02)
            metrics.generation_tokens.inc(16)
            metrics.count_prefill(200, rng.randrange(0, 200))
        metrics.set_state(rng.randrange(8), rng.randrange(4), rng.random())
        out.append(metrics.render().decode())
    return out


def per_page_ms(texts: list[str], work) -> float:
    """CPU time per page in ms (this process's, so other processes on the box count less), the least of
    5 rounds (interference only adds)."""
    rounds = []
    for _ in range(5):
        started = time.process_time()
        for text in texts:
            work(text)
        rounds.append((time.process_time() - started) * 1000.0 / len(texts))
    return min(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--requests-per-page", type=int, default=20)
    args = parser.parse_args()
    texts = pages(args.pages, args.requests_per_page)
    families, histograms = family_names(VLLM), histogram_names(VLLM)
    lines = texts[-1].count("\n")
    kept = keep_families(texts[-1], families).count("\n")
    print(f"{len(texts)} simulated vLLM pages, {lines} lines each ({kept} in the families lpxtop reads), "
          f"{args.requests_per_page} requests between two")

    fast = ReParser(families, histograms)
    fast_ms = per_page_ms(texts, lambda t: fast.parse(t))
    lean = ReParser(families, histograms)
    lean_ms = per_page_ms(texts, lambda t: lean.parse(t, histograms=False))
    kept_ms = per_page_ms(texts, lambda t: Exposition.parse(keep_families(t, families)))
    whole_ms = per_page_ms(texts, lambda t: Exposition.parse(t))
    expos = [fast.parse(t) for t in texts]
    state = {"tracker": MetricsTracker(300.0), "now": 0.0}

    def update(expo: Exposition) -> None:
        state["now"] += 2.0
        state["tracker"].update(expo, VLLM, state["now"], state["now"])

    update_ms = per_page_ms(expos, update)
    rows = [
        ("ReParser", fast_ms),
        ("ReParser, no histograms", lean_ms),
        ("prometheus_client, kept lines", kept_ms),
        ("prometheus_client, whole page", whole_ms),
        ("MetricsTracker.update", update_ms),
    ]
    for label, ms in rows:
        print(f"  {label:<32} {ms:7.3f} ms CPU per page")
    print(f"  ReParser / prometheus_client over the same lines: {fast_ms / kept_ms:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
