"""`lpxtop load` against real vLLM: a short sweep completes, and at concurrency 2 its TTFT median, output
throughput and TPOT median agree with `vllm bench serve` (vLLM's own benchmark client, from the kit's venv)
run on the same server just before and just after, with the same request shape: 32 prompt tokens, 64 output
tokens with ignore_eos.

The server's speed drifts on a shared 2-core machine (vLLM runs at nice 19 and loses the CPU to anything
else), so lpxtop's figures must sit within what the reference client saw on either side of it, widened by
tolerances that cover what the two clients do differently:
- vllm bench serve has no warm-up split: its first pair starts cold and its last request runs alone, and its
  duration runs from the first send to the last completion; lpxtop counts only the requests sent in a window
  under steady load. Over 24 prompts at concurrency 2 (12 rounds) the lone last request is at most 1/12 of
  its duration: up to ~8 % of throughput, hence THROUGHPUT_REL 0.2 (with TPOT held to the same).
- Its random dataset counts 32 tokens before the chat template; lpxtop aims at 32 including it (the server's
  usage count): ~10 prompt tokens fewer, a millisecond or two of prefill for this model; and TTFT medians of
  6-16 requests move by tens of ms from one run of a client to the next here: TTFT_REL 0.5 plus 15 ms.
Measured on this project's shared development box while seven other developers ran test suites (2026-12-01):
lpxtop at concurrency 2: TTFT median 40.3 ms, 31.8 tok/s, TPOT 19.0 ms; vllm bench serve before it: 130.0 ms,
20.9 tok/s, TPOT 80.5 ms; after it: 49.0 ms, 100.3 tok/s, TPOT 11.5 ms. The reference client's own two runs
differed fivefold, so this run could not narrow the tolerances; the bracket is what made it a comparison.
Rerun on a quiet machine (`.ci/realservers.sh -k load -s` prints the figures) to tighten them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realserver_harness import CACHE, SCRIPTS, VLLM_MODEL

pytestmark = [pytest.mark.realserver, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
INPUT_TOKENS, OUTPUT_TOKENS = 32, 64
PROMPTS = 24
TTFT_REL, TTFT_ABS_MS = 0.5, 15.0
THROUGHPUT_REL = 0.2


def run_lpxtop(url: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "lpxtop", "load", url, "--concurrency", "1,2,4", "--duration", "8", "--warmup", "2",
           "--input-tokens", str(INPUT_TOKENS), "--output-tokens", str(OUTPUT_TOKENS), "--ignore-eos",
           "--slo", "ttft_p95<=30s,error_rate<=1%", "--no-ui", "--json", str(out), "--model", VLLM_MODEL]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-2000:]
    print(done.stdout)
    return json.loads(out.read_text())


def run_vllm_bench(origin: str, out_dir: Path) -> dict:
    cmd = ["bash", str(SCRIPTS / "vllm-bench.sh"), "serve", "--backend", "openai-chat", "--endpoint",
           "/v1/chat/completions", "--base-url", origin, "--model", VLLM_MODEL, "--tokenizer", str(CACHE / VLLM_MODEL),
           "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS), "--random-output-len",
           str(OUTPUT_TOKENS), "--ignore-eos", "--max-concurrency", "2", "--num-prompts", str(PROMPTS),
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
           "--save-result", "--result-dir", str(out_dir), "--result-filename", "bench.json"]
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "LPXTOP_REALSERVERS": str(CACHE)})
    assert done.returncode == 0, (done.stdout[-1500:], done.stderr[-1500:])
    return json.loads((out_dir / "bench.json").read_text())


def test_sweep_completes_and_agrees_with_vllm_bench_serve(vllm_server, tmp_path) -> None:
    # vllm bench serve before and after lpxtop: the server's speed drifts on a shared machine, and lpxtop's
    # figures must sit within what the reference client saw around them (widened by the tolerances).
    before = run_vllm_bench(vllm_server.origin, tmp_path / "before")
    report = run_lpxtop(vllm_server.api_url, tmp_path / "load.json")
    after = run_vllm_bench(vllm_server.origin, tmp_path / "after")
    assert report["outcome"] == "done" and report["target"]["server_kind"] == "vllm"
    steps = {s["concurrency"]: s for s in report["steps"]}
    ours = steps[2]
    line = (f"concurrency 2: lpxtop TTFT median {ours['median_ttft_ms']:.1f} ms, output "
            f"{ours['output_throughput']:.1f} tok/s, TPOT median {ours['median_tpot_ms']:.1f} ms "
            f"({ours['completed']} requests, client-limited {ours['client_limited']})")
    for name, bench in (("before", before), ("after", after)):
        line += (f"; vllm bench serve {name}: {bench['median_ttft_ms']:.1f} ms, {bench['output_throughput']:.1f} "
                 f"tok/s, TPOT {bench['median_tpot_ms']:.1f} ms")
    print(line)
    assert sorted(steps) == [1, 2, 4]
    for c, step in steps.items():
        assert step["status"] == "done" and step["failed"] == 0 and step["completed"] >= c
        assert step["total_output_tokens"] == OUTPUT_TOKENS * step["completed"]  # ignore_eos, from usage
        # aimed with the server's own count (a real tokenizer is not exactly linear in words: within 10 %)
        assert abs(step["total_input_tokens"] / step["completed"] - INPUT_TOKENS) <= INPUT_TOKENS * 0.1
    # past the server's slots requests queue, and the server's own gauge says so
    assert steps[4]["server"]["peak_requests_waiting"] >= 1
    assert steps[4]["median_ttft_ms"] > steps[2]["median_ttft_ms"]
    for bench in (before, after):
        assert bench["completed"] == PROMPTS
    for key, rel, abs_ in (("median_ttft_ms", TTFT_REL, TTFT_ABS_MS), ("output_throughput", THROUGHPUT_REL, 0.0),
                           ("median_tpot_ms", THROUGHPUT_REL, 0.0)):
        low = min(before[key], after[key]) * (1 - rel) - abs_
        high = max(before[key], after[key]) * (1 + rel) + abs_
        assert low <= ours[key] <= high, (key, ours[key], before[key], after[key])
