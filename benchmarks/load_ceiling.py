"""How much load lpxtop's generator sustains on this machine while its TTFT stays true, next to a peer.

The ceiling of a load generator is where its own lateness starts to show in what it measures. This
script starts the simulated server in its own process with room for every request (no queueing: a large
`max_num_seqs`, no batch slowdown, no jitter), then holds one load step after another with lpxtop's
generator (`lpxtop.load`, in this process, its own thread and loop, exactly as `lpxtop load` runs it) and
with a peer client measured in the same run:

  - `aiohttp`: a streaming client written like vLLM's benchmark request function (`vllm bench serve` is
    aiohttp-based): one `ClientSession`, a `perf_counter()` per chunk of `response.content.iter_any()`,
    TTFT at the first chunk carrying content;
  - optionally `vllm bench serve` itself (`--vllm-bench`, the real-server kit's venv): its request
    throughput only, as it does not report response ids to check timestamps against.

For each request the error of its TTFT is the measured TTFT minus the truth: when the simulator wrote the
first token's bytes (its record, perf_counter_ns in the server process; CLOCK_MONOTONIC, so it compares
with the client's on one machine) minus when the client sent the request. Per step it prints the
achieved request rate and the error's p50/p99/max over a sample of the counted requests, and lpxtop's own
client-limit figures. At the end: the highest concurrency and rate at which lpxtop kept the error's p99 at
or below 5 ms, and lpxtop against the peer at concurrency 200 (target: at least the peer's rate with a p99
error at or below 20 ms).

The figures depend on what else the machine runs: on a shared box they are noise; compare lpxtop with
the peer within one run (both measured alike, one after the other).

usage: python benchmarks/load_ceiling.py [--concurrency 50,100,200,400] [--rates 50,100,200]
                                         [--seconds 10] [--warmup 3] [--output-tokens 32] [--itl-ms 40]
                                         [--vllm-bench] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.sim_processes import REPO, stop_process
from lpxtop.load.controller import LoadController
from lpxtop.load.plan import LoadPlan
from lpxtop.load.schedule import arrival_gaps
from lpxtop.model.endpoint import EndpointConfig
from lpxtop.model.probe import quantile_sorted
from lpxtop.sim.records import token_times_ns

MODEL = "sim-ceiling"
TRUTH_SAMPLE = 400  # requests per step checked against the simulator's record
FIDELITY_MS = 5.0
TARGET_CONCURRENCY = 200
TARGET_P99_MS = 20.0
SIM_CODE = """
import asyncio, sys
from lpxtop.cli.sim import serve
from lpxtop.sim.config import SimConfig
cfg = SimConfig(model={model!r}, ttft_ms={ttft_ms}, itl_ms={itl_ms}, max_num_seqs=100_000, kv_tokens=100_000_000,
                max_model_len=4096, batch_factor=0.0, jitter=0.0, prefill_ms_per_token=0.0, max_waiting=100_000,
                max_records=100_000, seed=1)
sys.exit(asyncio.run(serve(cfg, "127.0.0.1", 0)))
"""


@dataclass
class Row:
    client: str
    mode: str  # "concurrency" | "rate"
    level: float
    requests: int = 0
    failed: int = 0
    achieved_rps: float = 0.0
    checked: int = 0
    err_p50_ms: float | None = None
    err_p99_ms: float | None = None
    err_max_ms: float | None = None
    cpu_ms_per_request: float | None = None  # this process's CPU (the client's; the server is another process)
    client_lag_p99_ms: float | None = None
    cpu_wait_share: float | None = None
    client_limited: bool | None = None
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def simulator(ttft_ms: float, itl_ms: float) -> Iterator[str]:
    """The simulated server in its own process; yields its base URL (http://127.0.0.1:PORT)."""
    with tempfile.TemporaryDirectory(prefix="lpxtop-ceiling-") as workdir:
        log_path = Path(workdir) / "sim.log"
        code = SIM_CODE.format(model=MODEL, ttft_ms=ttft_ms, itl_ms=itl_ms)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            url = None
            while url is None and time.monotonic() < deadline and proc.poll() is None:
                found = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", log_path.read_text(errors="replace"))
                url = found.group(1) if found else None
                time.sleep(0.1)
            if url is None:
                raise RuntimeError(f"the simulator did not start: {log_path.read_text(errors='replace')[-400:]}")
            yield url
        finally:
            stop_process(proc)


def truth_errors(base: str, measured: list[tuple[str, int, float]]) -> list[float]:
    """Measured minus true TTFT (ms) for (response id, start perf_counter_ns, measured TTFT ms) triples."""
    def one(item: tuple[str, int, float]) -> float | None:
        response_id, start_ns, ttft_ms = item
        try:
            with urllib.request.urlopen(f"{base}/sim/records/{response_id}", timeout=10) as response:
                events = json.loads(response.read())["events"]
        except (OSError, ValueError, KeyError):
            return None
        times = token_times_ns(events)
        return ttft_ms - (times[0] - start_ns) / 1e6 if times else None

    sample = measured if len(measured) <= TRUTH_SAMPLE else random.Random(0).sample(measured, TRUTH_SAMPLE)
    with ThreadPoolExecutor(8) as pool:
        return [e for e in pool.map(one, sample) if e is not None]


def fill_errors(row: Row, errors: list[float]) -> None:
    ordered = sorted(errors)
    row.checked = len(ordered)
    if ordered:
        row.err_p50_ms = quantile_sorted(ordered, 0.5)
        row.err_p99_ms = quantile_sorted(ordered, 0.99)
        row.err_max_ms = ordered[-1]


def run_lpxtop(base: str, mode: str, level: float, args) -> Row:
    endpoint = EndpointConfig(name="load", url=f"{base}/v1", model=MODEL, timeout_s=60.0, first_token_timeout_s=30.0,
                              metrics_url=None)
    plan = LoadPlan(endpoint=endpoint, mode=mode, levels=(level,), output_tokens=args.output_tokens,
                    ignore_eos=True, duration_s=args.seconds, warmup_s=args.warmup, max_concurrency=100_000,
                    seed=1, warmup_requests=1)
    controller = LoadController(plan)
    measured: list[tuple[str, int, float]] = []
    controller.add_request_listener(
        lambda index, r: measured.append((r.response_id, r.start_ns, r.ttft_ms))
        if r.phase == "measured" and r.ok and r.response_id else None
    )
    seen = [0]
    controller.add_request_listener(lambda index, r: seen.__setitem__(0, seen[0] + 1))
    cpu0 = time.process_time()
    controller.start()
    if not controller.wait(args.seconds + args.warmup + 120):
        controller.stop()
        controller.wait(10)
    cpu = time.process_time() - cpu0
    row = Row("lpxtop", mode, level)
    row.cpu_ms_per_request = cpu * 1000 / seen[0] if seen[0] else None
    steps = controller.state().steps
    if not steps:
        row.notes.append(f"no step: {controller.error or controller.outcome}")
        return row
    step = steps[0]
    row.requests, row.failed = step.requests, step.failed
    row.achieved_rps = step.requests / step.duration_s if step.duration_s else 0.0
    row.client_lag_p99_ms, row.cpu_wait_share = step.client.lag_p99_ms, step.client.cpu_wait_share
    row.client_limited = step.client.limited
    fill_errors(row, truth_errors(base, measured))
    return row


async def _aiohttp_step(base: str, mode: str, level: float, args) -> tuple[list[tuple[str, int, float]], int, int, float, int]:
    """The peer: a streaming client as vLLM's benchmark request function. Returns measured triples, requests,
    failures, the measured duration (first send to last completion of the counted requests) and every
    request finished (warm-up and drain too)."""
    import aiohttp

    url = f"{base}/v1/chat/completions"
    start = time.perf_counter()
    window_start, window_end = start + args.warmup, start + args.warmup + args.seconds
    measured: list[tuple[str, int, float]] = []
    counted = {"n": 0, "failed": 0, "first": None, "last": None, "all": 0}
    stop = asyncio.Event()
    in_window_open = {"n": 0}

    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": f"[{random.getrandbits(48):x}] Write one short sentence about the sea."}],
                "max_tokens": args.output_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        st_ns = time.perf_counter_ns()
        st = time.perf_counter()
        in_window = window_start <= st < window_end
        if in_window:
            in_window_open["n"] += 1
        ttft = None
        rid = None
        ok = False
        try:
            async with session.post(url, json=body) as response:
                if response.status == 200:
                    buffer = b""
                    async for chunk in response.content.iter_any():
                        now_ns = time.perf_counter_ns()
                        buffer += chunk
                        while b"\n\n" in buffer:
                            event, buffer = buffer.split(b"\n\n", 1)
                            data = event.removeprefix(b"data: ").strip()
                            if data == b"[DONE]":
                                ok = True
                                continue
                            with contextlib.suppress(ValueError):
                                obj = json.loads(data)
                                rid = rid or obj.get("id")
                                choices = obj.get("choices") or []
                                if ttft is None and choices and (choices[0].get("delta") or {}).get("content"):
                                    ttft = (now_ns - st_ns) / 1e6
        except aiohttp.ClientError:
            ok = False
        end = time.perf_counter()
        counted["all"] += 1
        if in_window:
            in_window_open["n"] -= 1
            counted["n"] += 1
            counted["first"] = st if counted["first"] is None else min(counted["first"], st)
            counted["last"] = end if counted["last"] is None else max(counted["last"], end)
            if ok and ttft is not None and rid:
                measured.append((rid, st_ns, ttft))
            else:
                counted["failed"] += 1
        if time.perf_counter() >= window_end and in_window_open["n"] == 0:
            stop.set()

    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks: set[asyncio.Task] = set()
        if mode == "concurrency":
            async def worker() -> None:
                while not stop.is_set():
                    await one(session)

            workers = [asyncio.create_task(worker()) for _ in range(int(level))]
        else:
            async def arrivals() -> None:
                t = start
                for gap in arrival_gaps(level, 1.0, seed=1):
                    if stop.is_set():
                        return
                    await asyncio.sleep(max(0.0, t - time.perf_counter()))
                    task = asyncio.create_task(one(session))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                    t += gap

            workers = [asyncio.create_task(arrivals())]
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), args.warmup + args.seconds + 120)
        for task in (*workers, *tasks):
            task.cancel()
        await asyncio.gather(*workers, *tasks, return_exceptions=True)
    duration = (counted["last"] - counted["first"]) if counted["first"] is not None else 0.0
    return measured, counted["n"], counted["failed"], duration, counted["all"]


def run_aiohttp(base: str, mode: str, level: float, args) -> Row:
    row = Row("aiohttp", mode, level)
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        row.notes.append("aiohttp is not installed")
        return row
    cpu0 = time.process_time()
    measured, n, failed, duration, everything = asyncio.run(_aiohttp_step(base, mode, level, args))
    row.cpu_ms_per_request = (time.process_time() - cpu0) * 1000 / everything if everything else None
    row.requests, row.failed = n, failed
    row.achieved_rps = n / duration if duration else 0.0
    fill_errors(row, truth_errors(base, measured))
    return row


def run_vllm_bench(base: str, concurrency: int, args) -> Row:
    """`vllm bench serve` from the real-server kit (request throughput only)."""
    row = Row("vllm bench serve", "concurrency", concurrency)
    kit = Path(os.environ.get("LPXTOP_REALSERVERS") or Path.home() / ".cache" / "lpxtop-realservers")
    script = REPO / "tests" / "integration" / "realservers" / "vllm-bench.sh"
    tokenizer = kit / "small-llama"
    if not tokenizer.is_dir():
        row.notes.append(f"no tokenizer at {tokenizer} (build the real-server kit)")
        return row
    n = max(concurrency, int(concurrency * args.seconds / (args.itl_ms * args.output_tokens / 1000)))
    with tempfile.TemporaryDirectory(prefix="lpxtop-vllm-bench-") as out:
        cmd = ["bash", str(script), "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
               "--base-url", base, "--model", MODEL, "--tokenizer", str(tokenizer), "--dataset-name", "random",
               "--random-input-len", "16", "--random-output-len", str(args.output_tokens), "--ignore-eos",
               "--max-concurrency", str(concurrency), "--num-prompts", str(n), "--save-result", "--result-dir", out,
               "--result-filename", "r.json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        result = Path(out) / "r.json"
        if done.returncode != 0 or not result.exists():
            row.notes.append(f"vllm bench serve failed: {done.stderr[-300:]}")
            return row
        data = json.loads(result.read_text())
    row.requests, row.failed = data.get("completed", 0), data.get("failed", 0)
    row.achieved_rps = data.get("request_throughput", 0.0)
    row.notes.append("includes its own ramp (all prompts, no warm-up split)")
    return row


def fmt(x: float | None, digits: int = 2) -> str:
    return "--" if x is None else f"{x:.{digits}f}"


def print_table(rows: list[Row]) -> None:
    header = ("client", "load", "requests", "failed", "req/s", "checked", "err p50 ms", "err p99 ms", "err max ms",
              "CPU ms/req", "lag p99 ms", "cpu wait", "limited", "notes")
    lines = [header]
    for r in rows:
        load = f"{int(r.level)} conc" if r.mode == "concurrency" else f"{r.level:g} req/s"
        lines.append((r.client, load, str(r.requests), str(r.failed), fmt(r.achieved_rps, 1), str(r.checked),
                      fmt(r.err_p50_ms), fmt(r.err_p99_ms), fmt(r.err_max_ms), fmt(r.cpu_ms_per_request),
                      fmt(r.client_lag_p99_ms, 1),
                      "--" if r.cpu_wait_share is None else f"{r.cpu_wait_share * 100:.0f}%",
                      "--" if r.client_limited is None else ("yes" if r.client_limited else "no"), "; ".join(r.notes)))
    widths = [max(len(x[i]) for x in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())


def summary(rows: list[Row]) -> list[str]:
    out = []
    for mode, unit in (("concurrency", "concurrent"), ("rate", "req/s")):
        good = [r.level for r in rows if r.client == "lpxtop" and r.mode == mode and r.err_p99_ms is not None
                and r.err_p99_ms <= FIDELITY_MS and not r.failed]
        best = max(good) if good else None
        out.append(f"lpxtop, highest {mode} with TTFT error p99 <= {FIDELITY_MS:g} ms: "
                   + (f"{best:g} {unit}" if best is not None else "none of the levels tried"))
    at = {r.client: r for r in rows if r.mode == "concurrency" and r.level == TARGET_CONCURRENCY}
    ours = at.get("lpxtop")
    if ours is not None:
        for peer in ("aiohttp", "vllm bench serve"):
            theirs = at.get(peer)
            if theirs is None or not theirs.achieved_rps:
                continue
            met = ours.achieved_rps >= theirs.achieved_rps * 0.98 and (ours.err_p99_ms or 1e9) <= TARGET_P99_MS
            out.append(f"at concurrency {TARGET_CONCURRENCY}: lpxtop {ours.achieved_rps:.1f} req/s (error p99 "
                       f"{fmt(ours.err_p99_ms)} ms) vs {peer} {theirs.achieved_rps:.1f} req/s (error p99 "
                       f"{fmt(theirs.err_p99_ms)} ms): target {'met' if met else 'NOT met'}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="50,100,200,400", help="closed-loop levels (comma-separated)")
    parser.add_argument("--rates", default="50,100,200", help="open-loop levels in req/s ('' for none)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per step")
    parser.add_argument("--warmup", type=float, default=3.0, help="warm-up per step")
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--itl-ms", type=float, default=40.0, help="the simulator's time between tokens")
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="the simulator's prefill time")
    parser.add_argument("--peers", default="aiohttp", help="aiohttp and/or none (comma-separated)")
    parser.add_argument("--vllm-bench", action="store_true", help="also run vllm bench serve at concurrency 200")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args()
    sys.setswitchinterval(0.001)  # as `lpxtop load` runs
    levels = [float(x) for x in args.concurrency.split(",") if x.strip()]
    rates = [float(x) for x in args.rates.split(",") if x.strip()]
    peers = [p.strip() for p in args.peers.split(",") if p.strip() and p.strip() != "none"]
    rows: list[Row] = []
    with simulator(args.ttft_ms, args.itl_ms) as base:
        for mode, values in (("concurrency", levels), ("rate", rates)):
            for level in values:
                for client in ("lpxtop", *peers):
                    row = run_lpxtop(base, mode, level, args) if client == "lpxtop" else run_aiohttp(base, mode, level, args)
                    rows.append(row)
                    print(f"  {row.client:8} {mode} {level:g}: {row.achieved_rps:.1f} req/s, TTFT error p99 "
                          f"{fmt(row.err_p99_ms)} ms", file=sys.stderr, flush=True)
        if args.vllm_bench:
            rows.append(run_vllm_bench(base, TARGET_CONCURRENCY, args))
    print(f"\nsimulator: ttft {args.ttft_ms:g} ms, itl {args.itl_ms:g} ms, {args.output_tokens} output tokens, no "
          f"queueing; steps: {args.warmup:g} s warm-up + {args.seconds:g} s measured; TTFT error checked on up to "
          f"{TRUTH_SAMPLE} requests per step against the simulator's record\n")
    print_table(rows)
    print()
    for line in summary(rows):
        print(line)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
