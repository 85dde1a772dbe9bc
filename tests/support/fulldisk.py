"""A directory on a full filesystem, for the recording's disk-failure tests.

Preferred: a real 64 KiB tmpfs filled to its last block (needs root and a kernel that lets this process
mount, as in CI's container and on a developer's VM run as root). A full tmpfs still creates empty files
(it has inodes left) and then refuses every block, which is what a full disk does to a recording at the
moment it is created. Otherwise: a plain directory, and the command runs under `RLIMIT_FSIZE` = 0 (any
write to a regular file fails with EFBIG, SIGXFSZ ignored), the same refusal by another real mechanism
of the kernel; SQLite then reports an I/O error instead of "disk is full". `mode` says which one ran.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SIZE = "64k"


@dataclass
class FullDisk:
    path: Path
    mode: str  # "tmpfs" or "rlimit"

    def popen_kwargs(self) -> dict:
        """What a subprocess needs to meet the full disk (nothing on the tmpfs)."""
        if self.mode == "tmpfs":
            return {}
        return {"preexec_fn": _limit_file_size}

    @property
    def says_full(self) -> str:
        """The words lpxtop's message holds for this mechanism."""
        return "disk is full" if self.mode == "tmpfs" else "cannot write"


def _limit_file_size() -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def _fill(directory: Path) -> None:
    block = b"\0" * 4096
    with open(directory / "filler", "wb", buffering=0) as f:
        for _ in range(10_000):  # 40 MB at most: far more than the mount holds
            try:
                f.write(block)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    return
                raise
    raise RuntimeError(f"{directory} did not fill up")


@contextlib.contextmanager
def full_disk(tmp_path: Path) -> Iterator[FullDisk]:
    mount_point = tmp_path / f"full-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir()
    mounted = False
    if os.geteuid() == 0:
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0777", "tmpfs", str(mount_point)],
                                capture_output=True, timeout=10)
        mounted = result.returncode == 0
    try:
        if mounted:
            _fill(mount_point)
            yield FullDisk(mount_point, "tmpfs")
        else:
            yield FullDisk(mount_point, "rlimit")
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=10)
