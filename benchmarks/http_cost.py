"""What lpxtop's own HTTP client costs: CPU per 16-token probe, and chunk decoding against tiny chunks.

Part `probe`: one simulated server in its own process (no background load); this process sends
`--probes` sequential 16-token streaming probes (`lpxtop.engine.probe.run_probe`, one kept-alive
connection) and prints this process's CPU per probe and per socket read (user + system, from
`getrusage`). The probe's per-read cost is what the dashboard's 2 %-of-a-core target rests on.

Part `decode`: a chunked body of `--body-kib` KiB sent in chunks of 1, 16 and 1024 bytes over a real
loopback connection (a socket pair), read whole with `Response.read()`, while a ticker task on the same
loop records the longest gap between its turns: that gap is how late another endpoint's bytes would be
stamped while this body is decoded. Printed: CPU per MiB of body, the longest loop stall, and the
ticker's p99 gap.

Part `neighbour`: the probe's timestamp error against the simulator's own record
(|measured - true| TTFT and ITL, p50/p90/p99), alone and while a neighbour on the same client reads
/metrics from a server that sends 2 MiB in one-byte chunks as fast as it can (each in its own
process). The difference is what one response's parsing costs another endpoint's timestamps.

Run from the repository root with the project's Python:

  python benchmarks/http_cost.py                       # all parts
  python benchmarks/http_cost.py --part probe --probes 500 --rounds 3
  python benchmarks/http_cost.py --part decode --body-kib 256
  python benchmarks/http_cost.py --part neighbour --probes 100

Figures taken while other work loads the machine are noise: compare runs made back to back, and take
final figures on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from benchmarks.sim_processes import REPO, SIM_START_TIMEOUT_S, stop_process
from lpxtop.engine.probe import run_probe
from lpxtop.http import HttpClient
from lpxtop.http.connection import StreamProtocol
from lpxtop.model.endpoint import EndpointConfig

MODEL = "sim-bench"


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def probe_round(url: str, probes: int) -> tuple[float, float, float]:
    """(CPU ms per probe, reads per probe, wall s) for `probes` sequential probes on one client."""
    endpoint = EndpointConfig(name="bench", url=url, model=MODEL, max_tokens=16, timeout_s=10.0,
                              first_token_timeout_s=5.0, connect_timeout_s=2.0)
    async with HttpClient() as client:
        for _ in range(5):  # warm-up: connection open, code paths hot
            await run_probe(client, endpoint)
        # Reads per probe, counted in a separate pass so the counting does not weigh on the timed one.
        reads = 0
        original = StreamProtocol.data_received

        def counting(self, data: bytes) -> None:
            nonlocal reads
            reads += 1
            original(self, data)

        StreamProtocol.data_received = counting  # type: ignore[method-assign]
        try:
            for _ in range(10):
                await run_probe(client, endpoint)
        finally:
            StreamProtocol.data_received = original  # type: ignore[method-assign]
        failed = 0
        c0, t0 = cpu_s(), time.monotonic()
        for _ in range(probes):
            sample = await run_probe(client, endpoint)
            failed += not sample.ok
        c1, t1 = cpu_s(), time.monotonic()
    if failed:
        print(f"  ({failed} of {probes} probes failed)")
    return 1000 * (c1 - c0) / probes, reads / 10, t1 - t0


@contextlib.contextmanager
def fast_sim() -> Iterator[str]:
    """One `lpxtop sim` process with short delays (TTFT 2 ms, 1 ms a token), no background load; its API URL."""
    with tempfile.TemporaryFile() as log:
        argv = [sys.executable, "-m", "lpxtop", "sim", "--port", "0", "--model", MODEL, "--ttft-ms", "2",
                "--itl-ms", "1"]
        proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + SIM_START_TIMEOUT_S
            while time.monotonic() < deadline and proc.poll() is None:
                log.seek(0)
                found = re.search(rb"serving \S+ on (http://127\.0\.0\.1:\d+/v1)", log.read())
                if found:
                    yield found.group(1).decode()
                    return
                time.sleep(0.1)
            raise RuntimeError(f"the sim did not start (exit {proc.poll()})")
        finally:
            stop_process(proc)


def run_probe_part(probes: int, rounds: int) -> None:
    with fast_sim() as url:
        print(f"CPU of this process per 16-token probe ({probes} sequential probes per round, keep-alive)")
        for i in range(rounds):
            per_probe, reads, wall = asyncio.run(probe_round(url, probes))
            print(f"  round {i + 1}: {per_probe:5.3f} ms per probe, {reads:4.1f} reads per probe, "
                  f"{1000 * per_probe / reads:5.1f} µs per read, {wall:5.1f} s")


async def decode_one(body_kib: int, chunk: int) -> tuple[float, float, float]:
    """(CPU ms per MiB, longest loop stall ms, p99 ticker gap ms) reading one chunked body."""
    payload = b"x" * (body_kib * 1024)
    framed = bytearray(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(0, len(payload), chunk):
        piece = payload[i : i + chunk]
        framed += b"%x\r\n%s\r\n" % (len(piece), piece)
    framed += b"0\r\n\r\n"
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    loop = asyncio.get_running_loop()

    async def serve() -> None:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        with conn:
            await loop.sock_recv(conn, 65536)
            await loop.sock_sendall(conn, bytes(framed))
            await asyncio.sleep(0.5)

    server = asyncio.ensure_future(serve())
    gaps: list[float] = []
    done = False

    async def ticker() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    tick = asyncio.ensure_future(ticker())
    try:
        async with HttpClient(timeout=120.0) as client:
            c0 = cpu_s()
            response = await client.get(f"http://127.0.0.1:{port}/", max_bytes=len(payload) + 1)
            c1 = cpu_s()
            assert response.content == payload
    finally:
        done = True
        await tick
        server.cancel()
        listener.close()
    gaps.sort()
    p99 = gaps[int(0.99 * (len(gaps) - 1))] if gaps else 0.0
    return 1000 * (c1 - c0) * 1024 / body_kib, 1000 * (gaps[-1] if gaps else 0.0), 1000 * p99


def run_decode_part(body_kib: int) -> None:
    print(f"a {body_kib} KiB chunked body read whole on a loop shared with a ticker task")
    for chunk in (1, 16, 1024):
        per_mib, stall, p99 = asyncio.run(decode_one(body_kib, chunk))
        print(f"  chunks of {chunk:5d} B: {per_mib:8.1f} ms of CPU per MiB, longest loop stall {stall:7.2f} ms, "
              f"ticker p99 gap {p99:6.3f} ms")


TRICKLER = r"""
import socket, sys
body = b"1\r\nx\r\n" * int(sys.argv[1]) + b"0\r\n\r\n"
head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    with conn:
        try:
            while conn.recv(65536):
                conn.sendall(head)
                for i in range(0, len(body), 4096):
                    conn.sendall(body[i : i + 4096])
        except OSError:
            pass
"""


def truth(base: str, response_id: str) -> list[int]:
    import json
    import urllib.request

    from lpxtop.sim.records import token_times_ns

    with urllib.request.urlopen(f"{base}/sim/records/{response_id}", timeout=5) as answer:
        return token_times_ns(json.loads(answer.read())["events"])


async def neighbour_round(url: str, probes: int, trickle_url: str | None) -> tuple[list[float], list[float]]:
    """|TTFT error| and |ITL error| (ms) of `probes` sequential probes, with the neighbour when given."""
    endpoint = EndpointConfig(name="bench", url=url, model=MODEL, max_tokens=16, timeout_s=10.0,
                              first_token_timeout_s=5.0, connect_timeout_s=2.0)
    base = url.removesuffix("/v1")
    samples = []
    async with HttpClient(timeout=60.0) as client:
        await run_probe(client, endpoint)

        async def neighbour() -> None:
            while True:
                await client.get(trickle_url, max_bytes=64 << 20)

        task = asyncio.ensure_future(neighbour()) if trickle_url else None
        try:
            if task is not None:
                await asyncio.sleep(0.2)
            for _ in range(probes):
                samples.append(await run_probe(client, endpoint))
                await asyncio.sleep(0.02)
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    ttft, itl = [], []
    for s in samples:
        if not s.ok:
            continue
        times = truth(base, s.response_id)
        if len(times) != len(s.token_event_ms):
            continue
        ttft.append(abs(s.ttft_ms - (times[0] - s.start_ns) / 1e6))
        gaps = [(b - a) / 1e6 for a, b in zip(times, times[1:])]
        itl += [abs(m - t) for m, t in zip(s.itl_ms, gaps)]
    return ttft, itl


def run_neighbour_part(probes: int, rounds: int) -> None:
    def q(values: list[float], p: float) -> float:
        values = sorted(values)
        return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")

    with fast_sim() as url, tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-c", TRICKLER, str(2 << 20)], stdout=subprocess.PIPE,
                                stderr=log, stdin=subprocess.DEVNULL)
        try:
            port = int(proc.stdout.readline())  # type: ignore[union-attr]
            trickle_url = f"http://127.0.0.1:{port}/metrics"
            alone: tuple[list[float], list[float]] = ([], [])
            busy: tuple[list[float], list[float]] = ([], [])
            for _ in range(rounds):  # interleaved: a change in the machine's load hits both alike
                for into, neighbour in ((alone, None), (busy, trickle_url)):
                    ttft, itl = asyncio.run(neighbour_round(url, probes, neighbour))
                    into[0].extend(ttft)
                    into[1].extend(itl)
        finally:
            stop_process(proc)
    print(f"|probe stamp error| against the sim's record, {rounds} x {probes} probes each way (ms)")
    for name, (ttft, itl) in (("alone", alone), ("neighbour in 1-byte chunks", busy)):
        print(f"  {name:27s} TTFT p50 {q(ttft, 0.5):6.3f} p90 {q(ttft, 0.9):6.3f} p99 {q(ttft, 0.99):6.3f}   "
              f"ITL p50 {q(itl, 0.5):6.3f} p90 {q(itl, 0.9):6.3f} p99 {q(itl, 0.99):6.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("probe", "decode", "neighbour", "all"), default="all")
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--body-kib", type=int, default=256)
    args = parser.parse_args()
    if args.part in ("probe", "all"):
        run_probe_part(args.probes, args.rounds)
    if args.part in ("decode", "all"):
        run_decode_part(args.body_kib)
    if args.part in ("neighbour", "all"):
        run_neighbour_part(min(args.probes, 100), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
