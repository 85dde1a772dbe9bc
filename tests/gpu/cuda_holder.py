"""A process that holds GPU memory through the CUDA driver API, for the real-GPU tests.

    python tests/gpu/cuda_holder.py --gib 2 [--sim-port P] [--ramp-gib-s R --ramp-to-pct X]

It allocates with plain cuMemAlloc (never managed memory) through ctypes on libcuda.so.1, so it needs
no PyTorch or CuPy: only the NVIDIA driver that NVML itself comes with. With --sim-port it also serves
lpxtop's simulated inference server on 127.0.0.1:P from this same process, so that lpxtop can join the
GPU process to the endpoint that holds the port. With --ramp-gib-s it keeps allocating 1 GiB blocks at
that rate until the GPU is --ramp-to-pct full (the early-warning test), never beyond 97 %.

Prints one JSON object per line on stdout: {"ready": ...} once, then {"t", "held_bytes", "used_pct"}
after every block while ramping, then {"done": ...}. It exits when stdin closes (its parent went away)
or after --max-life-s, whichever comes first.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import threading
import time

GIB = 2**30
HARD_CAP_PCT = 97.0  # never fill the card beyond this, whatever the arguments say


class Cuda:
    """The few driver-API calls needed: init, primary context, allocate, query memory."""

    def __init__(self, device: int = 0) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.blocks: list[ctypes.c_uint64] = []

    @staticmethod
    def _check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA error {code}")

    def alloc(self, nbytes: int) -> None:
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)), "cuMemAlloc")
        # touch it, so the memory is really backed (and the GPU does a little work)
        self._check(self.lib.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0x5A), ctypes.c_size_t(nbytes)), "cuMemsetD8")
        self.blocks.append(ptr)

    def mem_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
        return free.value, total.value

    @property
    def held_bytes(self) -> int:
        return len(self.blocks) * GIB


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=int, default=1, help="GiB to hold from the start")
    parser.add_argument("--sim-port", type=int, default=0, help="also serve lpxtop's simulated server here")
    parser.add_argument("--ramp-gib-s", type=float, default=0.0, help="then keep allocating at this rate")
    parser.add_argument("--ramp-to-pct", type=float, default=50.0, help="stop ramping at this share of memory")
    parser.add_argument("--max-life-s", type=float, default=300.0)
    args = parser.parse_args()

    sim = None
    if args.sim_port:
        from lpxtop.sim.config import SimConfig
        from lpxtop.sim.thread import start_sim_in_thread

        sim = start_sim_in_thread(SimConfig(model="gpu-holder", ttft_ms=20, itl_ms=5), port=args.sim_port)

    cuda = Cuda()
    for _ in range(args.gib):
        cuda.alloc(GIB)
    free, total = cuda.mem_info()
    say(ready=True, pid=os.getpid(), held_bytes=cuda.held_bytes, total_bytes=total, free_bytes=free)

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    deadline = time.monotonic() + args.max_life_s

    if args.ramp_gib_s > 0:
        target_pct = min(args.ramp_to_pct, HARD_CAP_PCT)
        step_s = 1.0 / args.ramp_gib_s
        next_at = time.monotonic()
        while not stop.is_set() and time.monotonic() < deadline:
            free, total = cuda.mem_info()
            used_pct = 100.0 * (total - free) / total
            if used_pct + 100.0 * GIB / total > target_pct:
                break
            cuda.alloc(GIB)
            say(t=time.time(), held_bytes=cuda.held_bytes, used_pct=round(used_pct, 2))
            next_at += step_s
            stop.wait(max(0.0, next_at - time.monotonic()))
        free, total = cuda.mem_info()
        say(done=True, t=time.time(), held_bytes=cuda.held_bytes, used_pct=round(100.0 * (total - free) / total, 2))

    stop.wait(max(0.0, deadline - time.monotonic()))
    if sim is not None:
        sim.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
