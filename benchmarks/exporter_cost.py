"""What the Prometheus exporter costs above the headless engine (target: <= 0.2 % of one core).

4 simulated servers in their own processes; two kinds of child process, measured in alternating runs
so that the machine's drift hits both alike:

  engine     build_engine(URLs) started, no exporter: the headless engine alone
  exporter   `lpxtop exporter URLs --listen 127.0.0.1:0`, scraped every --scrape-interval (15 s) by a
             real Prometheus when one is installed (`--scraper prometheus`, the default when found),
             else by this script (GET /metrics with Prometheus' Accept and Accept-Encoding headers)

Each child's CPU (user + system, from psutil) over --seconds after a warm-up, as % of one core.
Because 0.2 % of a core is below a shared machine's run-to-run spread, the script also measures the
exporter's cost directly, which does not drift: the CPU one scrape costs the exporter process (mean
over --burst back-to-back scrapes), and so what scraping costs per second at the interval.

usage: python benchmarks/exporter_cost.py [--seconds 120] [--rounds 2] [--scrape-interval 15]
                                          [--scraper prometheus|builtin] [--burst 40]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from benchmarks.sim_processes import REPO, sim_processes, stop_process

ENGINE_CHILD = """
import sys, time
from lpxtop.cli.assemble import build_engine
from lpxtop.config import endpoints_from_urls
engine = build_engine(endpoints_from_urls(sys.argv[1:]), discover=False)
engine.start()
print("ready", flush=True)
try:
    time.sleep(1e9)
finally:
    engine.stop()
"""
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus 2.x sends


def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def scrape(url: str) -> int:
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return len(resp.read())


class BuiltinScraper:
    """Scrapes like Prometheus would, from a thread of this process (whose CPU is not measured)."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url, self.interval_s = url, interval_s
        self._stop = threading.Event()
        self.count = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(OSError):
                scrape(self.url)
                self.count += 1

    def __enter__(self) -> BuiltinScraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


class PrometheusScraper:
    """A real Prometheus scraping the exporter (its own CPU is not measured either)."""

    def __init__(self, binary: str, target: str, interval_s: float, workdir: Path) -> None:
        self.binary, self.target, self.interval_s, self.workdir = binary, target, interval_s, workdir
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> PrometheusScraper:
        config = self.workdir / "prometheus.yml"
        config.write_text(f"global:\n  scrape_interval: {self.interval_s:g}s\nscrape_configs:\n  - job_name: lpxtop\n"
                          f"    static_configs:\n      - targets: ['{self.target}']\n")
        with socket_port() as port:
            pass
        data = self.workdir / f"data-{time.monotonic_ns()}"
        self.proc = subprocess.Popen([self.binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
                                      f"--web.listen-address=127.0.0.1:{port}", "--log.level=error"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            stop_process(self.proc)


@contextlib.contextmanager
def socket_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def start_child(argv: list[str], wait_for: re.Pattern[str], log: Path) -> tuple[subprocess.Popen, str]:
    out = open(log, "w+")  # noqa: SIM115 - closed when the child is stopped
    proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = wait_for.search(log.read_text(errors="replace"))
        if found:
            return proc, found.group(0)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    stop_process(proc)
    raise RuntimeError(f"{argv[2:5]} did not start: {log.read_text(errors='replace')[-500:]}")


def measure(kind: str, urls: list[str], args: argparse.Namespace, workdir: Path, prometheus: str | None) -> dict:
    if kind == "engine":
        proc, _ = start_child([sys.executable, "-c", ENGINE_CHILD, *urls], re.compile("ready"), workdir / "engine.log")
        scraper: contextlib.AbstractContextManager = contextlib.nullcontext()
        metrics_url = None
    else:
        proc, line = start_child([sys.executable, "-m", "lpxtop", "exporter", *urls, "--listen", "127.0.0.1:0",
                                  "--no-discover"], re.compile(r"http://127\.0\.0\.1:\d+"), workdir / "exporter.log")
        metrics_url = f"{line}/metrics"
        target = line.removeprefix("http://")
        scraper = (PrometheusScraper(prometheus, target, args.scrape_interval, workdir) if prometheus
                   else BuiltinScraper(metrics_url, args.scrape_interval))
    try:
        child = psutil.Process(proc.pid)
        with scraper:
            time.sleep(args.warmup)
            c0, t0 = cpu_s(child), time.monotonic()
            time.sleep(args.seconds)
            pct = 100 * (cpu_s(child) - c0) / (time.monotonic() - t0)
            result = {"kind": kind, "cpu_pct": pct, "rss_mb": child.memory_info().rss / 2**20}
            if metrics_url is not None:
                # the exporter's own cost per scrape: back-to-back scrapes, the child's CPU divided by their number
                sizes = []
                c1 = cpu_s(child)
                b0 = time.monotonic()
                for _ in range(args.burst):
                    sizes.append(scrape(metrics_url))
                span = time.monotonic() - b0
                burst_cpu = cpu_s(child) - c1 - span * pct / 100  # minus what the engine spent meanwhile
                result["scrape_ms_cpu"] = 1000 * burst_cpu / args.burst
                result["scrape_bytes_gzip"] = statistics.mean(sizes)
            return result
    finally:
        stop_process(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0, help="measured seconds per run (default 120)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before measuring (default 10)")
    parser.add_argument("--rounds", type=int, default=2, help="engine/exporter pairs, alternating (default 2)")
    parser.add_argument("--scrape-interval", type=float, default=15.0, help="seconds between scrapes (default 15)")
    parser.add_argument("--scraper", choices=("prometheus", "builtin"), default=None,
                        help="who scrapes (default: a real Prometheus when the binary is found)")
    parser.add_argument("--burst", type=int, default=40, help="back-to-back scrapes for the per-scrape cost (default 40)")
    args = parser.parse_args()
    prometheus = None if args.scraper == "builtin" else shutil.which("prometheus")
    if args.scraper == "prometheus" and prometheus is None:
        print("prometheus is not installed; use --scraper builtin", file=sys.stderr)
        return 2
    print(f"4 simulated servers; engine defaults (a probe and a /metrics scrape every 2 s per endpoint); "
          f"scraped every {args.scrape_interval:g} s by {'Prometheus' if prometheus else 'this script'}; "
          f"{args.seconds:g} s per run after {args.warmup:g} s, {args.rounds} round(s)", flush=True)
    results: list[dict] = []
    with sim_processes(4, model=lambda i: f"m{i}") as sims, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for kind in ("engine", "exporter"):
                res = measure(kind, sims.urls, args, Path(tmp), prometheus)
                results.append(res)
                extra = (f"   one scrape {res['scrape_ms_cpu']:.2f} ms CPU, {res['scrape_bytes_gzip'] / 1024:.1f} KiB gzip"
                         if "scrape_ms_cpu" in res else "")
                print(f"  round {r + 1} {kind:9s} {res['cpu_pct']:5.2f} % of a core  RSS {res['rss_mb']:5.1f} MB{extra}",
                      flush=True)
    engine = [x["cpu_pct"] for x in results if x["kind"] == "engine"]
    exporter = [x["cpu_pct"] for x in results if x["kind"] == "exporter"]
    per_scrape = statistics.mean(x["scrape_ms_cpu"] for x in results if "scrape_ms_cpu" in x)
    diff = statistics.mean(exporter) - statistics.mean(engine)
    print(f"engine alone      {statistics.mean(engine):5.2f} % (runs: {', '.join(f'{x:.2f}' for x in engine)})")
    print(f"with the exporter {statistics.mean(exporter):5.2f} % (runs: {', '.join(f'{x:.2f}' for x in exporter)})")
    print(f"difference        {diff:+5.2f} % of a core (target <= 0.20; this machine's run-to-run spread applies)")
    print(f"scraping alone    {100 * per_scrape / 1000 / args.scrape_interval:5.3f} % of a core "
          f"({per_scrape:.2f} ms of CPU per scrape, every {args.scrape_interval:g} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
