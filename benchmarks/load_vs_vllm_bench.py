"""`lpxtop load --concurrency C` next to `vllm bench serve --max-concurrency C`, on one server, back to back.

Both are closed loops at C: `vllm bench serve` at its default `--request-rate inf` makes one task per prompt
at once and lets C of them run (a semaphore), `lpxtop load` runs C workers; each sends the next request
when one ends. For each level C and each repeat, this script runs the two one after the other against the
same server (the order alternates between repeats, so drift on a shared machine does not favour one), with
the same output length (`--ignore-eos`) and the same prompt length by the server's own count (lpxtop's
`--input-tokens` is set to what the server counted for the benchmark's `--random-input-len` in the level's
first run), and the same
number of rounds: the benchmark gets `--rounds` × C prompts, lpxtop a one-round warm-up and a window of
the other rounds (a round's length taken from the benchmark's run). lpxtop runs twice: with `--ttft-from call`
(the reference's clock, started when a request is made: the mode held to the reference within 15 % + 5 ms)
and with its own clock (started when the request goes out). It also runs with `--stagger`
(its workers spread over the warm-up instead of starting together), which the reference cannot do.

It prints one markdown table: per level and client, the median over the repeats of TTFT p50 (with the
repeats' range), TTFT p99, TPOT p50 and request throughput as each client reports them, the rhythm of the
sends (`synchrony`, lpxtop/load/rhythm.py, computed the same way for both: for the benchmark from its
per-request start times after its first round, which leaves at once by construction), the prompt tokens the server counted, the mean TTFT each client measured next to
the server's own over the same run (Δsum/Δcount of `vllm:time_to_first_token_seconds`: which client's
figure the server confirms), and whether lpxtop's TTFT p50 agrees with the benchmark's within 15 % + 5 ms. Request throughput is each client's own definition: the benchmark's
covers its whole run (ramp and tail included), lpxtop's its measured window's requests.

Servers: the simulator (`lpxtop sim --model small-llama --ttft-ms 20 --itl-ms 40 --max-num-seqs 512
--kv-tokens 10000000`, in its own process) at `--levels`; with `--real`, also the real-server kit's vLLM
(small-llama on CPU, `--max-num-seqs` slots, started and niced as the integration tests start it) at
`--real-levels`. Needs the kit (`tests/integration/realservers/setup.sh`): `vllm bench serve` and its
tokenizer come from it. On a shared machine the figures drift: compare within a row, look at the ranges.

usage: python benchmarks/load_vs_vllm_bench.py [--levels 1,10,50,100,200] [--repeats 2] [--rounds 4]
            [--output-tokens 32] [--input-len 19] [--no-stagger] [--real] [--real-levels 16]
            [--max-num-seqs 16] [--no-sim] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.sim_processes import stop_process
from lpxtop.load.rhythm import synchrony
from tests.support.paths import REPO

MODEL = "small-llama"
SIM_ARGS = ["--ttft-ms", "20", "--itl-ms", "40", "--max-num-seqs", "512", "--kv-tokens", "10000000"]
KIT = Path(os.environ.get("LPXTOP_REALSERVERS") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
           / "lpxtop-realservers")
BENCH = REPO / "tests" / "integration" / "realservers" / "vllm-bench.sh"
AGREE_SHARE, AGREE_MS = 0.15, 5.0
MIN_PROMPTS = 16  # at C=1 a few rounds are too few requests for a p50
RUN_TIMEOUT_S = 1200.0
CLIENTS = {"call": "lpxtop load --ttft-from call", "sent": "lpxtop load", "stagger": "lpxtop load --stagger"}


@dataclass
class Run:
    server: str
    level: int
    client: str  # "vllm bench serve" | "lpxtop load" | "lpxtop load --stagger"
    repeat: int
    ttft_p50: float | None = None
    ttft_p99: float | None = None
    ttft_mean: float | None = None
    server_ttft_mean: float | None = None  # the server's own, Δsum/Δcount of its TTFT histogram over the run
    tpot_p50: float | None = None
    req_s: float | None = None
    synchrony: float | None = None
    prompt_tokens: float | None = None
    requests: int = 0
    failed: int = 0
    seconds: float = 0.0  # the run's own duration (the benchmark's: its whole run)
    client_limited: bool | None = None
    note: str = ""


@dataclass
class Level:
    server: str
    level: int
    round_s: float | None = None  # one round's length, from the benchmark's run
    runs: list[Run] = field(default_factory=list)


def server_ttft(base: str) -> tuple[float, float] | None:
    """(sum s, count) of vllm:time_to_first_token_seconds from the server's /metrics, or None."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError:
        return None
    total = count = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:time_to_first_token_seconds":
            for sample in family.samples:
                if sample.name.endswith("_sum"):
                    total += sample.value
                elif sample.name.endswith("_count"):
                    count += sample.value
    return total, count


def with_server_ttft(base: str, measure, *args, **kwargs) -> Run:
    """Run `measure(*args, **kwargs)` (a Run) and fill its server_ttft_mean from readings before and after it."""
    first = server_ttft(base)
    run = measure(*args, **kwargs)
    last = server_ttft(base)
    if first and last and last[1] > first[1]:
        run.server_ttft_mean = (last[0] - first[0]) / (last[1] - first[1]) * 1000
    return run


def bench(base: str, level: int, args, out_dir: Path, repeat: int, server: str, prompts: int | None = None) -> Run:
    run = Run(server, level, "vllm bench serve", repeat)
    prompts = prompts or max(args.rounds * level, MIN_PROMPTS)
    name = f"vb-{server}-{level}-{repeat}.json"
    cmd = ["bash", str(BENCH), "serve", "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
           "--base-url", base, "--model", MODEL, "--tokenizer", str(KIT / MODEL), "--dataset-name", "random",
           "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_tokens), "--ignore-eos",
           "--max-concurrency", str(level), "--num-prompts", str(prompts), "--seed", str(repeat),
           "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", name]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    path = out_dir / name
    if done.returncode != 0 or not path.exists():
        run.note = f"failed: {(done.stderr or done.stdout)[-300:]}"
        return run
    data = json.loads(path.read_text())
    run.ttft_p50, run.ttft_p99 = data.get("median_ttft_ms"), data.get("p99_ttft_ms")
    run.ttft_mean = data.get("mean_ttft_ms")
    run.tpot_p50, run.req_s = data.get("median_tpot_ms"), data.get("request_throughput")
    run.requests, run.failed = data.get("completed", 0), data.get("failed", 0)
    run.seconds = data.get("duration", 0.0)
    # its first round leaves at once by construction (every task exists from the start): the rhythm is that
    # of the rounds after it, as lpxtop's is that of its measured window
    starts = sorted(int(t * 1e9) for t in data.get("start_times") or [] if t is not None)[level:]
    run.synchrony = synchrony(starts, level)
    lens = [n for n in data.get("input_lens") or [] if n]
    run.prompt_tokens = statistics.fmean(lens) if lens else None
    return run


def lpxtop(base: str, level: int, args, out_dir: Path, repeat: int, server: str, round_s: float,
           prompt_tokens: int | None, mode: str) -> Run:
    """One `lpxtop load` run; `mode`: "call" (--ttft-from call, the reference's clock), "sent" (the
    default clock) or "stagger"."""
    client = CLIENTS[mode]
    stagger = mode == "stagger"
    run = Run(server, level, client, repeat)
    rounds = max(args.rounds, -(-MIN_PROMPTS // level))
    warmup = max(1.0, round_s * (1.5 if stagger else 1.0))
    duration = max(1.0, round_s * (rounds - 1))
    name = out_dir / f"lpx-{server}-{level}-{repeat}-{mode}.json"
    cmd = [sys.executable, "-m", "lpxtop", "load", base, "--concurrency", str(level), "--output-tokens",
           str(args.output_tokens), "--ignore-eos", "--warmup", f"{warmup:.2f}", "--duration", f"{duration:.2f}",
           "--no-ui", "--no-record", "--json", str(name), "--seed", str(repeat)]
    if prompt_tokens:
        cmd += ["--input-tokens", str(prompt_tokens)]
    if stagger:
        cmd.append("--stagger")
    if mode == "call":
        cmd += ["--ttft-from", "call"]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    run.seconds = time.monotonic() - started
    if done.returncode != 0 or not name.exists():
        run.note = f"failed: {done.stderr[-300:]}"
        return run
    steps = json.loads(name.read_text())["steps"]
    if not steps:
        run.note = "no step"
        return run
    step = steps[0]
    run.ttft_p50, run.ttft_p99 = step.get("median_ttft_ms"), step.get("p99_ttft_ms")
    run.ttft_mean = step.get("mean_ttft_ms")
    run.tpot_p50, run.req_s = step.get("median_tpot_ms"), step.get("request_throughput")
    run.requests, run.failed = step.get("completed", 0), step.get("failed", 0)
    run.synchrony = (step.get("rhythm") or {}).get("synchrony")
    run.prompt_tokens = step["total_input_tokens"] / step["completed"] if step.get("completed") else None
    run.client_limited = step.get("client_limited")
    return run


@contextlib.contextmanager
def simulator(workdir: Path) -> Iterator[tuple[str, str]]:
    log_path = workdir / "sim.log"
    argv = [sys.executable, "-m", "lpxtop", "sim", "--port", "0", "--model", MODEL, *SIM_ARGS]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"on (http://127\.0\.0\.1:\d+)/v1", log_path.read_text(errors="replace"))
            url = found.group(1) if found else None
            time.sleep(0.1)
        if url is None:
            raise RuntimeError(f"the simulator did not start: {log_path.read_text(errors='replace')[-400:]}")
        yield url, f"simulator (`lpxtop sim --model {MODEL} {' '.join(SIM_ARGS)}`)"
    finally:
        stop_process(proc)


@contextlib.contextmanager
def real_vllm(max_num_seqs: int) -> Iterator[tuple[str, str]]:
    from tests.support.realservers import running, start_server, warm_up

    server = start_server("vllm-load-vs-bench", "start-vllm.sh", ["--max-num-seqs", str(max_num_seqs)],
                          {"MODEL": MODEL})
    with running(server) as ready:
        warm_up(ready, MODEL)
        yield ready.origin, f"real vLLM 0.32 CPU ({MODEL}, --max-num-seqs {max_num_seqs}, 2 cores)"


def measure(base: str, server: str, levels: list[int], args, out_dir: Path) -> list[Level]:
    found: list[Level] = []
    for level in levels:
        prompt_tokens = None  # the benchmark's prompt as the server counts it: lpxtop aims at the same
        row = Level(server, level)
        found.append(row)
        for repeat in range(args.repeats):
            order = ["bench", "lpxtop"] if repeat % 2 == 0 else ["lpxtop", "bench"]
            if row.round_s is None:
                order = ["bench", "lpxtop"]
            for what in order:
                if what == "bench":
                    r = with_server_ttft(base, bench, base, level, args, out_dir, repeat, server)
                    if r.seconds and r.requests and row.round_s is None:
                        row.round_s = r.seconds / max(1.0, r.requests / level)
                    if prompt_tokens is None and r.prompt_tokens:
                        prompt_tokens = round(r.prompt_tokens)
                    row.runs.append(r)
                    print(f"[{server}] C={level} repeat {repeat + 1}: {row.runs[-1].client}: TTFT p50 "
                          f"{fmt(row.runs[-1].ttft_p50)} ms {row.runs[-1].note}", file=sys.stderr, flush=True)
                else:
                    for mode in ("call", "sent"):  # the reference's clock, then lpxtop's own
                        row.runs.append(with_server_ttft(base, lpxtop, base, level, args, out_dir, repeat, server,
                                                         row.round_s or 5.0, prompt_tokens, mode=mode))
                        print(f"[{server}] C={level} repeat {repeat + 1}: {row.runs[-1].client}: TTFT p50 "
                              f"{fmt(row.runs[-1].ttft_p50)} ms {row.runs[-1].note}", file=sys.stderr, flush=True)
            if args.stagger and level > 1:
                row.runs.append(with_server_ttft(base, lpxtop, base, level, args, out_dir, repeat, server,
                                                 row.round_s or 5.0, prompt_tokens, mode="stagger"))
                print(f"[{server}] C={level} repeat {repeat + 1}: lpxtop --stagger: TTFT p50 "
                      f"{fmt(row.runs[-1].ttft_p50)} ms {row.runs[-1].note}", file=sys.stderr, flush=True)
    return found


def fmt(x: float | None, digits: int = 1) -> str:
    return "--" if x is None else f"{x:.{digits}f}"


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def agrees(ours: float | None, theirs: float | None) -> bool | None:
    if ours is None or theirs is None:
        return None
    return abs(ours - theirs) <= AGREE_SHARE * theirs + AGREE_MS


def table(levels: list[Level]) -> str:
    lines = ["| server | C | client | TTFT p50 ms (range) | TTFT p99 ms | TTFT mean ms (server's) | TPOT p50 ms | "
             "req/s | synchrony | prompt tok | TTFT p50 within 15 % + 5 ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in levels:
        ref = median([r.ttft_p50 for r in row.runs if r.client == "vllm bench serve"])
        for client in ("vllm bench serve", *CLIENTS.values()):
            runs = [r for r in row.runs if r.client == client]
            if not runs:
                continue
            p50s = [r.ttft_p50 for r in runs if r.ttft_p50 is not None]
            p50 = median(p50s)
            spread = f" ({min(p50s):.0f}–{max(p50s):.0f})" if len(p50s) > 1 else ""
            if client == "vllm bench serve":
                verdict = "reference"
            elif client == CLIENTS["call"]:  # the mode that claims to match the reference
                ok = agrees(p50, ref)
                verdict = "--" if ok is None else ("yes" if ok else "**no**")
            elif client == CLIENTS["sent"]:  # lpxtop's own clock: its own send delay left out
                verdict = f"own clock: {p50 / ref:.2f}× the reference" if p50 and ref else "--"
            else:
                verdict = f"other load: {p50 / ref:.1f}× the reference" if p50 and ref else "--"
            limited = " (client-limited)" if any(r.client_limited for r in runs) else ""
            notes = "; ".join(sorted({r.note for r in runs if r.note}))
            lines.append(
                f"| {row.server} | {row.level} | {client}{limited} | {fmt(p50)}{spread} | "
                f"{fmt(median([r.ttft_p99 for r in runs]))} | {fmt(median([r.ttft_mean for r in runs]))} "
                f"({fmt(median([r.server_ttft_mean for r in runs]))}) | {fmt(median([r.tpot_p50 for r in runs]))} | "
                f"{fmt(median([r.req_s for r in runs]), 2)} | {fmt(median([r.synchrony for r in runs]), 2)} | "
                f"{fmt(median([r.prompt_tokens for r in runs]))} | {verdict}{(' ' + notes) if notes else ''} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,10,50,100,200", help="concurrencies on the simulator")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each client per level (default 2)")
    parser.add_argument("--rounds", type=int, default=4, help="requests per level = rounds x C (default 4)")
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=19, help="the benchmark's --random-input-len")
    parser.add_argument("--no-stagger", dest="stagger", action="store_false", help="skip the lpxtop --stagger runs")
    parser.add_argument("--no-sim", dest="sim", action="store_false", help="skip the simulator")
    parser.add_argument("--real", action="store_true", help="also the real-server kit's vLLM")
    parser.add_argument("--real-levels", default="16", help="concurrencies on the real vLLM (default 16)")
    parser.add_argument("--max-num-seqs", type=int, default=16, help="the real vLLM's slots (default 16)")
    parser.add_argument("--json", metavar="FILE", help="write every run as JSON too")
    args = parser.parse_args()
    if not (KIT / "venv-vllm" / ".lpxtop-ok").exists() or not (KIT / MODEL / "config.json").exists():
        print(f"the real-server kit is not built in {KIT}: bash tests/integration/realservers/setup.sh vllm",
              file=sys.stderr)
        return 2
    found: list[Level] = []
    described = []
    with tempfile.TemporaryDirectory(prefix="lpxtop-vs-bench-") as tmp:
        out_dir = Path(tmp)
        if args.sim:
            with simulator(out_dir) as (base, what):
                described.append(what)
                found += measure(base, "sim", [int(x) for x in args.levels.split(",") if x.strip()], args, out_dir)
        if args.real:
            with real_vllm(args.max_num_seqs) as (base, what):
                described.append(what)
                found += measure(base, "vLLM", [int(x) for x in args.real_levels.split(",") if x.strip()], args,
                                 out_dir)
    print(f"\n{'; '.join(described)}; {args.output_tokens} output tokens (--ignore-eos), the benchmark's "
          f"--random-input-len {args.input_len} (lpxtop: --input-tokens at the server's count of it), "
          f"{args.rounds} rounds per level, {args.repeats} repeat(s), back to back\n")
    print(table(found))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(row) for row in found], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
