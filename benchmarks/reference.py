"""lpxtop's numbers against `vllm bench serve`, vLLM's own benchmark client, on the same real vLLM.

The question a user brings: when lpxtop watches a server under load, do its TTFT, ITL and TPOT say what
the reference benchmark says, and is its server-side mean TTFT the server's own? For each concurrency C
this script runs, against one real vLLM (the real-server kit's small-llama on CPU, `--max-num-seqs 4`,
started and niced as the integration tests' harness starts it):

1. `vllm bench serve` alone at concurrency C+1 (random prompts, fixed output length with `--ignore-eos`):
   lpxtop's probe is one more client, so a probe beside C benchmark clients is compared with a benchmark
   client among C+1. That holds while C+1 requests fit the server's slots: beyond them, a closed-loop
   client's wait in the queue is not what a request arriving at a random time waits (the probe samples the
   time average, as it should), so the TTFT rows at C >= slots show how far the two definitions part;
2. `vllm bench serve` at concurrency C, and, from the moment its main run starts, `lpxtop once` with
   enough probes, shaped like the benchmark's requests (the same output length; a prompt of filler words
   calibrated with the server's own usage count to the benchmark's prompt length). lpxtop scrapes
   /metrics through a loopback pass-through that keeps every page it passed on, so the server-side mean
   TTFT lpxtop reports is checked against Δsum/Δcount of `vllm:time_to_first_token_seconds` read
   directly (prometheus_client) from the same pages: exact, or lpxtop is wrong.

Per C it prints lpxtop's TTFT p50/p95, ITL p50/p95 and TPOT p50 next to the benchmark's (its requests
that started while lpxtop probed, in the same run; and the run alone at C+1), the spread a sample as
small as lpxtop's would have (subsamples of the benchmark's own requests), lpxtop's client-limited
probes, its server-side mean TTFT against the direct reading, and the client/engine gap as lpxtop shows
it (or its reason). `--json FILE` writes it all (`-`: stdout instead of the table).

Clocks: `vllm bench serve` stamps requests with `time.perf_counter()` (CLOCK_MONOTONIC on Linux), as this
script does, so the benchmark's requests are selected by lpxtop's run window on one clock.

The figures depend on the machine: on a shared 2-core box the server's speed drifts with whatever else
runs; within one run both clients see the same server.

usage: python benchmarks/reference.py [--concurrency 1,2,4,8] [--probes 40] [--rounds 25]
                                      [--max-num-seqs 4] [--origin http://127.0.0.1:PORT] [--keep DIR]
                                      [--markdown] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.load.prompts import Calibration, filler_text
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import quantile_sorted
from tests.support.paths import REPO
from tests.support.realservers import CACHE, SCRIPTS, running, start_server, warm_up

MODEL = "small-llama"
INPUT_TOKENS, OUTPUT_TOKENS = 32, 64
TTFT_FAMILY = "vllm:time_to_first_token_seconds"
PROBE_INTERVAL_S = 0.2  # once's default mean gap between probes
SUBSAMPLES = 2000  # draws for the spread of a probe-sized sample
PAGES_KEPT = 300  # /metrics pages kept by the pass-through (the first, and the newest)
BENCH_TIMEOUT_S = 900.0


# ---- /metrics, passed through and kept


@dataclass(frozen=True)
class Page:
    """One /metrics page lpxtop received: when the pass-through asked vLLM for it, and its bytes."""

    asked: float  # perf_counter
    body: bytes


class MetricsPassThrough:
    """A loopback HTTP server that answers GET /metrics with vLLM's page, keeping what it passed on.

    lpxtop scrapes it (`--metrics-url`), so the pages checked against lpxtop's server-side figures are
    exactly the pages lpxtop read. Bounded: the first page and the newest PAGES_KEPT.
    """

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.first: Page | None = None
        self.newest: deque[Page] = deque(maxlen=PAGES_KEPT)
        self.count = 0
        self.failures = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as vLLM itself answers

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                if self.path.split("?")[0] != "/metrics":
                    self._answer(404, b"not found")
                    return
                asked = time.perf_counter()
                try:
                    with urllib.request.urlopen(f"{outer.origin}/metrics", timeout=10) as answer:
                        body = answer.read()
                except OSError as exc:
                    with outer._lock:
                        outer.failures += 1
                    self._answer(502, str(exc).encode())
                    return
                outer._keep(Page(asked, body))
                self._answer(200, body)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-pass", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/metrics"

    def _keep(self, page: Page) -> None:
        with self._lock:
            if self.first is None:
                self.first = page
            else:
                self.newest.append(page)
            self.count += 1

    def reset(self) -> None:
        with self._lock:
            self.first, self.count, self.failures = None, 0, 0
            self.newest.clear()

    def pages(self) -> list[Page]:
        with self._lock:
            return ([self.first] if self.first else []) + list(self.newest)

    def __enter__(self) -> MetricsPassThrough:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def ttft_totals(body: bytes) -> tuple[float, float] | None:
    """(sum in seconds, count) of vLLM's TTFT histogram on one page, read with prometheus_client."""
    total = count = None
    for family in text_string_to_metric_families(body.decode("utf-8", errors="replace")):
        if family.name != TTFT_FAMILY:
            continue
        for s in family.samples:
            if s.name == f"{TTFT_FAMILY}_sum":
                total = (total or 0.0) + s.value
            elif s.name == f"{TTFT_FAMILY}_count":
                count = (count or 0.0) + s.value
    return None if total is None or count is None else (total, count)


def direct_server_mean(pages: Sequence[Page], lpxtop_count: float | None) -> dict:
    """Δsum/Δcount between lpxtop's first page and the page whose Δcount is the count lpxtop reports.

    lpxtop's window runs from its first scrape to its last read of the histograms (`once` reads them on
    its last scrape), so the match is normally the newest page; which one it was is reported.
    """
    out: dict = {"pages": len(pages), "page": None, "count": None, "mean_ms": None}
    if len(pages) < 2 or lpxtop_count is None:
        return out
    base = ttft_totals(pages[0].body)
    if base is None:
        return out
    for index in range(len(pages) - 1, 0, -1):
        totals = ttft_totals(pages[index].body)
        if totals is None:
            continue
        count = totals[1] - base[1]
        if count == lpxtop_count and count > 0:
            out.update(page=index + 1, count=count, mean_ms=(totals[0] - base[0]) * 1000 / count)
            return out
        if count < lpxtop_count:
            break  # cumulative: older pages hold fewer
    newest = ttft_totals(pages[-1].body)
    if newest is not None and newest[1] > base[1]:
        out.update(count=newest[1] - base[1], mean_ms=(newest[0] - base[0]) * 1000 / (newest[1] - base[1]))
    return out


def clients_mean_ttft(result: dict, ours: dict, since: float, until: float) -> dict:
    """The clients' own mean TTFT over the requests the server's window holds: the benchmark's requests
    whose first token came between the window's two pages, and lpxtop's probes (all inside it). Less the
    server's mean, it is the time outside vLLM's TTFT clock (the HTTP server, tokenization, the network):
    what lpxtop's gap shows when its conditions allow, measured here from both clients."""
    ttfts = [result["ttfts"][i] * 1000 for i, start in enumerate(result["start_times"])
             if _ok(result, i) and since <= start + result["ttfts"][i] <= until]
    probes = ours["probes_ok"] or 0
    probe_mean = ours["ttft_mean"]
    n = len(ttfts) + (probes if probe_mean is not None else 0)
    if n == 0:
        return {"requests": 0, "mean_ms": None}
    total = sum(ttfts) + (probe_mean * probes if probe_mean is not None else 0.0)
    return {"requests": n, "bench_requests": len(ttfts), "probes": probes, "mean_ms": total / n}


# ---- vllm bench serve


@dataclass
class BenchRun:
    """One `vllm bench serve` run: its saved result (with per-request detail) and when its main run began."""

    concurrency: int
    prompts: int
    result: dict
    main_at: float | None  # perf_counter
    ended_at: float
    output_tail: str = ""


def run_bench(
    origin: str, concurrency: int, prompts: int, out_dir: Path, seed: int,
    on_main: Callable[[], None] | None = None, timeout_s: float = BENCH_TIMEOUT_S,
) -> BenchRun:
    """Run `vllm bench serve` (the kit's wrapper) and return its detailed result; call `on_main` when its main
    run starts (after its single test request), so that lpxtop probes only the loaded server."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"bench-c{concurrency}-{seed}.json"
    cmd = ["bash", str(SCRIPTS / "vllm-bench.sh"), "serve", "--backend", "openai-chat", "--endpoint",
           "/v1/chat/completions", "--base-url", origin, "--model", MODEL, "--tokenizer", str(CACHE / MODEL),
           "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS), "--random-output-len",
           str(OUTPUT_TOKENS), "--ignore-eos", "--max-concurrency", str(concurrency), "--num-prompts", str(prompts),
           "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99",
           "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out_dir),
           "--result-filename", name]
    env = {**os.environ, "LPXTOP_REALSERVERS": str(CACHE), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    killer = threading.Timer(timeout_s, proc.kill)
    killer.start()
    tail: deque[str] = deque(maxlen=60)
    main_at = None
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line)
            if main_at is None and "Starting main benchmark run" in line:
                main_at = time.perf_counter()
                if on_main is not None:
                    on_main()
        proc.wait(30)
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    ended = time.perf_counter()
    path = out_dir / name
    if proc.returncode != 0 or not path.exists():
        raise RuntimeError(f"vllm bench serve exited {proc.returncode}:\n{''.join(tail)[-3000:]}")
    return BenchRun(concurrency, prompts, json.loads(path.read_text()), main_at, ended, "".join(tail))


def _ok(result: dict, i: int) -> bool:
    return not result["errors"][i] and bool(result["output_lens"][i]) and bool(result["itls"][i])


def _q(values: Sequence[float], q: float) -> float | None:
    return quantile_sorted(sorted(values), q) if values else None


def _tpot_ms(result: dict, i: int) -> float | None:
    n = result["output_lens"][i]
    return (result["latencies"][i] - result["ttfts"][i]) * 1000 / (n - 1) if n and n > 1 else None


def bench_figures(result: dict, window: tuple[float, float] | None = None) -> dict:
    """The benchmark's TTFT/ITL/TPOT over its successful requests (those that started within `window`),
    computed as it computes them (numpy's linear percentiles over its per-request detail)."""
    idx = [i for i, start in enumerate(result["start_times"])
           if _ok(result, i) and (window is None or window[0] <= start <= window[1])]
    return figures(result, idx)


def figures(result: dict, idx: Sequence[int]) -> dict:
    ttfts = [result["ttfts"][i] * 1000 for i in idx]
    itls = [x * 1000 for i in idx for x in result["itls"][i]]
    tpots = [t for i in idx if (t := _tpot_ms(result, i)) is not None]
    return {
        "requests": len(idx),
        "ttft_p50": _q(ttfts, 0.5), "ttft_p95": _q(ttfts, 0.95),
        "ttft_mean": sum(ttfts) / len(ttfts) if ttfts else None,
        "itl_p50": _q(itls, 0.5), "itl_p95": _q(itls, 0.95), "tpot_p50": _q(tpots, 0.5),
        "input_tokens_mean": sum(result["input_lens"][i] for i in idx) / len(idx) if idx else None,
    }


def sample_spread(result: dict, n: int, seed: int = 1, window: tuple[float, float] | None = None) -> dict:
    """How much each figure moves in a sample of `n` requests drawn from the benchmark's own (those that started
    within `window`; lpxtop's probe sample is that small): the 5th and 95th percentile of the figure over
    SUBSAMPLES draws."""
    idx = [i for i, start in enumerate(result["start_times"])
           if _ok(result, i) and (window is None or window[0] <= start <= window[1])]
    if len(idx) < 2 or n < 2:
        return {}
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {}
    for _ in range(SUBSAMPLES):
        picked = [rng.choice(idx) for _ in range(n)]  # with replacement: a bootstrap of size n
        for key, value in figures(result, picked).items():
            if key.startswith(("ttft", "itl", "tpot")) and value is not None:
                draws.setdefault(key, []).append(value)
    return {key: [_q(v, 0.05), _q(v, 0.95)] for key, v in draws.items()}


# ---- lpxtop


def calibrate_prompt(api_url: str, target_tokens: float) -> tuple[str, int | None]:
    """A prompt of filler words whose probe request (random prefix and chat template included) the server
    counts as about `target_tokens` prompt tokens, measured with lpxtop's own probe and the server's usage."""

    async def count(client: HttpClient, words: int) -> int | None:
        ep = EndpointConfig(name="calibrate", url=api_url, model=MODEL, prompt=filler_text(words), max_tokens=2)
        for _ in range(3):
            sample = await run_probe(client, ep)
            if sample.prompt_tokens:
                return sample.prompt_tokens
        return None

    async def main() -> tuple[str, int | None]:
        async with HttpClient(timeout=30.0) as client:
            a, b = await count(client, 8), await count(client, 40)
            if a is None or b is None:
                return filler_text(round(target_tokens)), None
            words = Calibration.from_points(8, a, 40, b).words_for(round(target_tokens))
            return filler_text(words), await count(client, words)

    return asyncio.run(main())


@dataclass
class OnceRun:
    """One `lpxtop once --json` beside the benchmark: its report and its run window (perf_counter)."""

    started: float
    ended: float = 0.0
    report: dict = field(default_factory=dict)
    stderr: str = ""


class OnceBeside:
    """Starts `lpxtop once` in its own process when the benchmark's main run starts; collects it after."""

    def __init__(self, api_url: str, metrics_url: str, probes: int, prompt: str, deadline_s: float) -> None:
        self.cmd = [sys.executable, "-m", "lpxtop", "once", api_url, "--model", MODEL, "-n", str(probes),
                    "--interval", str(PROBE_INTERVAL_S), "--max-tokens", str(OUTPUT_TOKENS), "--prompt", prompt,
                    "--metrics-url", metrics_url, "--deadline", f"{deadline_s:.0f}", "--json"]
        self.deadline_s = deadline_s
        self.proc: subprocess.Popen | None = None
        self.run: OnceRun | None = None
        self._waiter = threading.Thread()
        self._out: str | None = None

    def start(self) -> None:
        self.run = OnceRun(started=time.perf_counter())
        self.proc = subprocess.Popen(self.cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._waiter = threading.Thread(target=self._wait, name="once-waiter", daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        """Collect the output and stamp the end as soon as `once` exits (the benchmark may run on)."""
        assert self.proc is not None and self.run is not None
        try:
            self._out, err = self.proc.communicate(timeout=self.deadline_s + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self._out, err = self.proc.communicate(timeout=10)
        self.run.ended = time.perf_counter()
        self.run.stderr = err[-2000:]

    def finish(self) -> OnceRun:
        if self.proc is None or self.run is None:
            raise RuntimeError("the benchmark's main run never started, so lpxtop never probed")
        self._waiter.join(self.deadline_s + 60)
        try:
            self.run.report = json.loads(self._out)
        except (json.JSONDecodeError, TypeError) as exc:
            raise RuntimeError(f"lpxtop once gave no JSON ({exc}): {self.run.stderr}") from exc
        return self.run

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)


def lpxtop_figures(report: dict) -> dict:
    """lpxtop's figures from `once --json` (schema 1)."""
    (ep,) = report["endpoints"]
    lat = ep.get("latency_ms") or {}

    def p(metric: str, key: str) -> float | None:
        return (lat.get(metric) or {}).get(key)

    server = ep.get("server") or {}
    ttft = server.get("server_ttft_ms") or {}
    gap = server.get("ttft_gap_ms") or {}
    probes = ep.get("probes") or {}
    return {
        "probes_ok": probes.get("ok"), "probes_failed": probes.get("failed"), "errors": probes.get("errors"),
        "client_limited": probes.get("client_limited"),
        "ttft_p50": p("ttft", "p50"), "ttft_p95": p("ttft", "p95"), "ttft_mean": p("ttft", "mean"),
        "itl_p50": p("itl", "p50"), "itl_p95": p("itl", "p95"), "tpot_p50": p("tpot", "p50"),
        "server_ttft_mean_ms": ttft.get("mean"), "server_ttft_count": ttft.get("count"),
        "server_ttft_max_at_most_ms": ttft.get("max_at_most"),
        "gap": {k: gap.get(k) for k in ("value", "method", "estimate", "range", "reason")} if gap else None,
        "server_while_probing": ep.get("server_while_probing"),
        "server_kind": ep.get("server_kind"), "status": ep.get("status"),
    }


# ---- one concurrency


def probes_window_s(alone: dict, probes: int) -> float:
    """How long `probes` probes take: each about a request of the run at C+1 plus the mean gap."""
    return probes * ((alone.get("mean_e2el_ms") or 1000.0) / 1000 + PROBE_INTERVAL_S)


def measure(origin: str, c: int, args: argparse.Namespace, passthrough: MetricsPassThrough, workdir: Path,
            prompt_state: dict) -> dict:
    """The two benchmark runs and lpxtop's probes for concurrency `c`; returns the row (see --json)."""
    seed = random.randrange(1 << 30)
    alone = run_bench(origin, c + 1, (c + 1) * args.rounds, workdir, seed)
    alone_all = bench_figures(alone.result)
    if "prompt" not in prompt_state:
        target = alone_all["input_tokens_mean"] or INPUT_TOKENS
        prompt_state["prompt"], prompt_state["tokens"] = calibrate_prompt(f"{origin}/v1", target)
        prompt_state["target"] = target
    # Long enough that lpxtop's probes all run under the benchmark's load: the benchmark's C clients
    # finish about C/(C+1) of the requests the run at C+1 finished per second.
    need_s = probes_window_s(alone.result, args.probes) * 1.4 + 5.0
    rate = alone.result["request_throughput"] * c / (c + 1)
    prompts = max(c * 4, math.ceil(need_s * rate))
    once = OnceBeside(f"{origin}/v1", passthrough.url, args.probes, prompt_state["prompt"], deadline_s=need_s * 2 + 60)
    passthrough.reset()
    try:
        beside = run_bench(origin, c, prompts, workdir, seed + 1, on_main=once.start)
        ran = once.finish()
    finally:
        once.stop()
    window = (ran.started, ran.ended)
    starts = [s for i, s in enumerate(beside.result["start_times"]) if _ok(beside.result, i)]
    notes = []
    if starts and max(starts) < ran.ended - 1.0:
        notes.append(f"lpxtop probed {ran.ended - max(starts):.1f} s past the benchmark's last request")
    ours = lpxtop_figures(ran.report)
    pages = passthrough.pages()
    direct = direct_server_mean(pages, ours["server_ttft_count"])
    if direct["page"] is not None:
        direct["clients"] = clients_mean_ttft(beside.result, ours, pages[0].asked, pages[direct["page"] - 1].asked)
    if direct["page"] is None:
        notes.append("no /metrics page lpxtop read gives the count it reports")
    elif direct["page"] != direct["pages"]:
        notes.append(f"lpxtop's server window ended at page {direct['page']} of {direct['pages']}")
    return {
        "concurrency": c,
        "lpxtop": ours,
        "lpxtop_run_s": ran.ended - ran.started,
        "bench_beside": {**bench_figures(beside.result, window), "concurrency": c,
                         "requests_in_run": beside.result["completed"], "failed": beside.result["failed"]},
        "bench_alone": {**alone_all, "concurrency": c + 1, "failed": alone.result["failed"],
                        "output_throughput": alone.result["output_throughput"]},
        "spread_at_probe_sample": sample_spread(alone.result, ours["probes_ok"] or args.probes),
        # the same for the requests beside lpxtop's: with slow prefills their TPOT is two-humped (with and
        # without a prefill in their decode), and a p50 of ~30 of them jumps between the humps
        "spread_beside": sample_spread(beside.result, ours["probes_ok"] or args.probes, window=window),
        "server_direct": direct,
        "metrics_pages_passed": passthrough.count,
        "notes": notes,
    }


# ---- output


def _f(value: float | None, fmt: str = "{:.1f}") -> str:
    return "--" if value is None else fmt.format(value)


ROWS = (("TTFT p50", "ttft_p50"), ("TTFT p95", "ttft_p95"), ("ITL p50", "itl_p50"), ("ITL p95", "itl_p95"),
        ("TPOT p50", "tpot_p50"))


def render(doc: dict) -> str:
    lines = [f"lpxtop against vllm bench serve on real vLLM ({doc['server']}), {doc['date']}",
             f"requests: {INPUT_TOKENS} random prompt tokens (about {_f(doc['prompt']['bench_tokens'], '{:.0f}')} "
             f"with the chat template), {OUTPUT_TOKENS} output tokens with ignore_eos; lpxtop's probe: "
             f"{OUTPUT_TOKENS} tokens, prompt {doc['prompt']['probe_tokens']} tokens, "
             f"{doc['probes']} probes at exponential gaps (mean {PROBE_INTERVAL_S} s)", ""]
    for row in doc["rows"]:
        c, ours, beside, alone = row["concurrency"], row["lpxtop"], row["bench_beside"], row["bench_alone"]
        spread = row["spread_at_probe_sample"]
        lines.append(
            f"concurrency {c}: lpxtop {ours['probes_ok']} probes ({ours['probes_failed']} failed, "
            f"{ours['client_limited']} client-limited) in {row['lpxtop_run_s']:.0f} s; "
            f"bench beside it {beside['requests']} requests in that window; bench alone at {c + 1}: "
            f"{alone['requests']} requests")
        lines.append(f"  {'ms':<10} {'lpxtop':>8} {'bench@' + str(c + 1) + ' alone':>15} "
                     f"{'(n=' + str(ours['probes_ok']) + ' spread)':>22} {'bench@' + str(c) + ' beside':>15}")
        for label, key in ROWS:
            lo_hi = spread.get(key)
            spread_text = "--" if not lo_hi else f"{lo_hi[0]:.1f}-{lo_hi[1]:.1f}"
            lines.append(f"  {label:<10} {_f(ours[key]):>8} {_f(alone[key]):>15} {spread_text:>22} "
                         f"{_f(beside[key]):>15}")
        direct = row["server_direct"]
        same = (ours["server_ttft_mean_ms"] is not None and direct["mean_ms"] is not None
                and math.isclose(ours["server_ttft_mean_ms"], direct["mean_ms"], rel_tol=1e-3, abs_tol=0.002))
        upto = ("its last page" if direct["page"] == direct["pages"]
                else f"page {direct['page'] or '?'} of the {direct['pages']} kept")
        lines.append(
            f"  server TTFT mean: lpxtop {_f(ours['server_ttft_mean_ms'], '{:.3f}')} ms over "
            f"{_f(ours['server_ttft_count'], '{:.0f}')} requests; Δsum/Δcount read directly from the pages lpxtop "
            f"read (its first to {upto}): {_f(direct['mean_ms'], '{:.3f}')} ms over {_f(direct['count'], '{:.0f}')}: "
            f"{'equal' if same else 'DIFFERENT'}")
        clients = direct.get("clients") or {}
        if clients.get("mean_ms") is not None and ours["server_ttft_mean_ms"] is not None:
            lines.append(
                f"  clients' mean TTFT over the same window: {clients['mean_ms']:.1f} ms over {clients['requests']} "
                f"requests ({clients['bench_requests']} benchmark, {clients['probes']} probes): "
                f"{clients['mean_ms'] - ours['server_ttft_mean_ms']:+.1f} ms outside vLLM's TTFT clock")
        gap = ours["gap"] or {}
        if gap.get("value") is not None:
            lines.append(f"  time outside the engine (lpxtop's gap): {gap['value']:.1f} ms ({gap['method']})")
        else:
            lines.append(f"  time outside the engine (lpxtop's gap): -- ({gap.get('reason') or 'none'})")
        for note in row["notes"]:
            lines.append(f"  note: {note}")
        lines.append("")
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    """The table of docs/comparisons.md: one row per concurrency (ms; p50/p95 where two figures share a cell)."""

    def pair(d: dict, a: str, b: str) -> str:
        return f"{_f(d[a])} / {_f(d[b])}"

    lines = ["| C | TTFT p50 / p95: lpxtop | bench beside | bench alone at C+1 | ITL p50 / p95: lpxtop | bench beside "
             "| TPOT p50: lpxtop | bench beside | server mean TTFT: lpxtop | read directly | outside vLLM's clock |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in doc["rows"]:
        ours, beside, alone, direct = row["lpxtop"], row["bench_beside"], row["bench_alone"], row["server_direct"]
        clients = direct.get("clients") or {}
        outside = (clients["mean_ms"] - ours["server_ttft_mean_ms"]
                   if clients.get("mean_ms") is not None and ours["server_ttft_mean_ms"] is not None else None)
        lines.append(
            f"| {row['concurrency']} | {pair(ours, 'ttft_p50', 'ttft_p95')} | {pair(beside, 'ttft_p50', 'ttft_p95')} "
            f"| {pair(alone, 'ttft_p50', 'ttft_p95')} | {pair(ours, 'itl_p50', 'itl_p95')} "
            f"| {pair(beside, 'itl_p50', 'itl_p95')} | {_f(ours['tpot_p50'])} | {_f(beside['tpot_p50'])} "
            f"| {_f(ours['server_ttft_mean_ms'], '{:.3f}')} | {_f(direct['mean_ms'], '{:.3f}')} "
            f"| {_f(outside, '{:+.1f}')} |")
    return "\n".join(lines)


@contextlib.contextmanager
def vllm_origin(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The server to measure: `--origin`, or a fresh vLLM started (and always stopped) like the tests' one."""
    if args.origin:
        yield args.origin.rstrip("/"), f"given: {args.origin}"
        return
    server = start_server("vllm-reference", "start-vllm.sh", ["--max-num-seqs", str(args.max_num_seqs)],
                          {"MODEL": MODEL})
    with running(server) as ready:
        warm_up(ready, MODEL)
        yield ready.origin, f"{MODEL} on CPU, --max-num-seqs {args.max_num_seqs}, started in {ready.ready_s:.0f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,2,4,8", help="benchmark concurrencies (default 1,2,4,8)")
    parser.add_argument("--probes", type=int, default=40, help="lpxtop probes per concurrency (default 40)")
    parser.add_argument("--rounds", type=int, default=25,
                        help="requests per client in the run alone at C+1 (default 25)")
    parser.add_argument("--max-num-seqs", type=int, default=4, help="vLLM's slots when this script starts it")
    parser.add_argument("--origin", help="measure this running vLLM (http://127.0.0.1:PORT) instead of starting one")
    parser.add_argument("--keep", metavar="DIR", help="keep vllm bench serve's detailed results (per request) in DIR")
    parser.add_argument("--markdown", action="store_true", help="also print the table of docs/comparisons.md")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON to FILE (- for stdout, no table)")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    if not levels or min(levels) < 1 or args.probes < 2 or args.rounds < 2:
        parser.error("concurrencies >= 1, --probes >= 2, --rounds >= 2")
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime())
    rows: list[dict] = []
    prompt_state: dict = {}
    with (tempfile.TemporaryDirectory(prefix="lpxtop-reference-") as tmp, vllm_origin(args) as (origin, what),
          MetricsPassThrough(origin) as passthrough):
        for c in levels:
            rows.append(measure(origin, c, args, passthrough, Path(args.keep or tmp), prompt_state))
            print(f"concurrency {c} measured", file=sys.stderr, flush=True)
    doc = {
        "schema": "lpxtop-reference/1", "date": started, "server": what, "probes": args.probes,
        "command": "python benchmarks/reference.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "prompt": {"bench_tokens": prompt_state.get("target"), "probe_tokens": prompt_state.get("tokens")},
        "rows": rows,
    }
    if args.json:
        text = json.dumps(doc, indent=2)
        if args.json == "-":
            print(text)
            return 0
        Path(args.json).write_text(text + "\n")
    print(render(doc))
    if args.markdown:
        print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
