"""What one streamed token's socket read costs, with nothing of lpxtop's around it.

Starts 4 simulated servers (`lpxtop sim`, own processes, background load) and, in this process, reads
one 32-token stream from each every 2 s (lpxtop's default probe asks for 16; the figure is per read),
with the smallest reader of each kind; then prints this process's CPU per read:

  asyncio   an asyncio.Protocol on the standard event loop (lpxtop's engine runs on one)
  uvloop    the same Protocol on uvloop (only when uvloop is installed)
  thread    one thread per server, blocking recv()

The reader does nothing but take a perf_counter_ns() stamp and look for [DONE], so the figure is the
floor of one wake-up per read on this machine: compare lpxtop's own probes with it (engine_cost.py).

usage: python benchmarks/read_floor.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import threading
import time

from benchmarks.sim_processes import sim_processes

MODEL = "sim-llama-8b"  # the simulator's default model name
BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32,
                   "stream": True}).encode()


def request(port: int) -> bytes:
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n")
    return head.encode() + BODY


class Counter:
    def __init__(self) -> None:
        self.reads = 0


def blocking_reader(port: int, stop: threading.Event, counter: Counter) -> None:
    while not stop.is_set():
        began = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(request(port))
            while True:
                data = s.recv(65536)
                time.perf_counter_ns()
                counter.reads += 1
                if not data or b"[DONE]" in data:
                    break
        stop.wait(max(0.0, 2.0 - (time.monotonic() - began)))


class StreamProtocol(asyncio.Protocol):
    def __init__(self, done: asyncio.Future, counter: Counter) -> None:
        self.done = done
        self.counter = counter

    def data_received(self, data: bytes) -> None:
        time.perf_counter_ns()
        self.counter.reads += 1
        if b"[DONE]" in data and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def async_reader(port: int, until: float, counter: Counter) -> None:
    loop = asyncio.get_running_loop()
    while time.monotonic() < until:
        began = time.monotonic()
        done = loop.create_future()
        transport, _ = await loop.create_connection(lambda done=done: StreamProtocol(done, counter), "127.0.0.1", port)
        transport.write(request(port))
        await asyncio.wait_for(done, 10)
        transport.close()
        await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - began)))


def measure(kind: str, ports: list[int], seconds: float) -> str:
    counter = Counter()
    stop = threading.Event()
    if kind == "thread":
        workers = [threading.Thread(target=blocking_reader, args=(p, stop, counter), daemon=True) for p in ports]
    else:
        if kind == "uvloop":
            import uvloop

            new_loop = uvloop.new_event_loop
        else:
            new_loop = asyncio.new_event_loop
        until = time.monotonic() + seconds + 4

        def run() -> None:
            async def main() -> None:
                await asyncio.gather(*(async_reader(p, until, counter) for p in ports))

            loop = new_loop()
            try:
                loop.run_until_complete(main())
            finally:
                loop.close()

        workers = [threading.Thread(target=run, daemon=True)]
    for w in workers:
        w.start()
    time.sleep(3)  # warm-up
    r0, n0, t0 = resource.getrusage(resource.RUSAGE_SELF), counter.reads, time.monotonic()
    time.sleep(seconds)
    r1, n1, t1 = resource.getrusage(resource.RUSAGE_SELF), counter.reads, time.monotonic()
    stop.set()
    for w in workers:
        w.join(15)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    reads = max(1, n1 - n0)
    return (f"  {kind:8s} {100 * cpu / (t1 - t0):5.2f} % of a core, {reads / (t1 - t0):4.0f} reads/s, "
            f"{1e6 * cpu / reads:4.0f} µs of CPU per read")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with sim_processes(4, model=lambda i: MODEL) as sims:
        ports = sims.ports
        kinds = ["asyncio", "thread"]
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("(uvloop is not installed: its row is left out)")
        else:
            kinds.insert(1, "uvloop")
        print(f"one read per streamed event, 4 servers, a 32-token stream from each every 2 s, {args.seconds:g} s each")
        for kind in kinds:
            print(measure(kind, ports, args.seconds), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
