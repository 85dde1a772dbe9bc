"""The probe's own CPU per read of a stream, with no socket: what `BatchedReads` and the chunk rule cost.

A streamed probe pays, per read, the event loop's wake-up (see read_floor.py) plus lpxtop's own work on
the bytes: the sink `Response.feed` calls (`BatchedReads.take`, engine/probe/reads.py) and, in batches,
the SSE parser and the chunk rule (`ChunkSink`, engine/probe/chunks.py). This script measures only the second part, in-process and single-threaded, so it is
steady on a busy machine: it feeds streams shaped like vLLM's (a role chunk, N content chunks of which
a share are `"content": ""`, a finish chunk, a usage chunk, `[DONE]`; one event per read, as a server
writes them) through the probe's real sink, and prints CPU per read (`time.process_time_ns`, best of
`--repeats` rounds).

usage: python benchmarks/probe_parse_cost.py [--tokens 16] [--streams 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from lpxtop.engine.probe.chunks import ChunkSink
from lpxtop.engine.probe.reads import BatchedReads
from lpxtop.engine.probe.stream import Watchdog


def vllm_like_reads(tokens: int, empty_share: float, rng: random.Random) -> list[bytes]:
    """One stream as its reads: vLLM 0.32's chunk shapes (tests/fixtures/sse), one event per read."""
    head = {"id": "chatcmpl-9ed993df4a8e2674", "object": "chat.completion.chunk", "created": 1795971895,
            "model": "tiny-llama"}

    def event(obj: dict) -> bytes:
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    def choice(delta: dict, finish: str | None = None) -> dict:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "token_ids": None}

    reads = [event({**head, "choices": [choice({"role": "assistant", "content": ""})]})]
    for i in range(tokens - 1):
        text = "" if rng.random() < empty_share else f" word{i}"
        reads.append(event({**head, "choices": [choice({"content": text})]}))
    reads.append(event({**head, "choices": [choice({"content": " end"}, "length")]}))
    usage = {"prompt_tokens": 24, "total_tokens": 24 + tokens, "completion_tokens": tokens}
    reads.append(event({**head, "choices": [], "usage": usage}))
    reads.append(b"data: [DONE]\n\n")
    return reads


async def measure(streams: list[list[bytes]]) -> tuple[int, int]:
    """(CPU ns, reads) to take every stream through a fresh BatchedReads, as Response.feed would."""
    reads = 0
    began = time.process_time_ns()
    for stream in streams:
        sink = ChunkSink()
        watchdog = Watchdog()
        events = BatchedReads(sink, watchdog, 10**18)
        t = 1
        for chunk in stream:
            reads += 1
            t += 1000
            if events.take(chunk, t):
                break
        events.catch_up()
        watchdog.disarm()
        assert sink.done and len(sink.token_ns) >= 1
    return time.process_time_ns() - began, reads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)
    print(f"probe sink CPU per read, {args.tokens}-token streams, {args.streams} streams, best of {args.repeats}")
    for empty_share in (0.0, 0.2):
        streams = [vllm_like_reads(args.tokens, empty_share, rng) for _ in range(args.streams)]
        best = min(asyncio.run(measure(streams)) for _ in range(args.repeats))
        cpu_ns, reads = best
        print(f"  empty-content share {empty_share:.1f}: {cpu_ns / reads / 1000:6.2f} µs per read "
              f"({cpu_ns / args.streams / 1000:7.1f} µs per stream)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
