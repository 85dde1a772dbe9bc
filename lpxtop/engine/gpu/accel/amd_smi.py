"""The one door to AMD SMI, through the maintained `pyrsmi` package (ROCm's own; `pip install 'lpxtop[rocm]'`).

pyrsmi 1.x (`pyrsmi.rocml`) wraps libamd_smi.so from ROCm 6+ (or the `amdsmi` Python package). What lpxtop
reads from it, per device index: `smi_get_device_name` (market name), `smi_get_device_uuid`,
`smi_get_device_pci_id` (the 64-bit BDF, to pair the device with its sysfs card),
`smi_get_device_memory_used` / `..._total` (VRAM, bytes), `smi_get_device_utilization` (GFX activity, %),
`smi_get_device_memory_busy` (%), `smi_get_device_average_power` (W). Its functions answer -1 or "" on an
error and log it on the root logger; `smi_initialize` raises when ROCm or the driver is missing. Here none
of that escapes: a value is None, an init failure is one line (retried at most every `retry_s` seconds), and
pyrsmi's own log records are kept off lpxtop's terminal. pyrsmi has no temperature, power cap, energy
counter or per-process memory: those come from the amdgpu sysfs files (amd_sysfs.py).

Functions are looked up on the module at call time, so tests substitute the lowest layer (the
`pyrsmi.rocml` module) with a fake one.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RETRY_INIT_S = 30.0
MODULE = "pyrsmi.rocml"


@dataclass(frozen=True)
class SmiReading:
    """One device's figures from AMD SMI; None where it answered -1, "" or raised."""

    name: str | None = None
    uuid: str | None = None
    bdf: int | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    util_pct: float | None = None
    mem_busy_pct: float | None = None
    power_w: float | None = None


class _QuietPyrsmi(logging.Filter):
    """pyrsmi logs every failed call with logging.error on the root logger: over a dashboard that would be
    a line of text per second across the screen. Its records are dropped; lpxtop says what matters once."""

    def __init__(self) -> None:
        super().__init__()
        self.directories: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(record.pathname.startswith(d) for d in self.directories)


_QUIET = _QuietPyrsmi()


def _quiet(module: Any) -> None:
    path = getattr(module, "__file__", None)
    if not path:
        return
    _QUIET.directories.add(os.path.dirname(os.path.abspath(path)) + os.sep)
    root = logging.getLogger()
    if _QUIET not in root.filters:
        root.addFilter(_QUIET)


class AmdSmi:
    """Lazily initialised, thread-safe access to pyrsmi; never raises."""

    def __init__(self, *, retry_s: float = RETRY_INIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._retry_s = retry_s
        self._clock = clock
        self._lock = threading.RLock()
        self._module: Any = None
        self._initialized = False
        self._closed = False
        self._failed_at: float | None = None
        self.failure: str | None = None
        self.init_attempts = 0

    @property
    def initialized(self) -> bool:
        return self._initialized

    def known_unavailable(self) -> bool:
        """True while `ensure()` would answer from memory (shut down, or failed and not due for a retry)."""
        with self._lock:
            if self._initialized:
                return False
            return self._closed or (self._failed_at is not None and self._clock() - self._failed_at < self._retry_s)

    def ensure(self) -> str | None:
        """Initialise AMD SMI if needed: None when ready, else why not (remembered for `retry_s`)."""
        with self._lock:
            if self._initialized:
                return None
            if self._closed:
                return "AMD SMI was shut down"
            now = self._clock()
            if self._failed_at is not None and now - self._failed_at < self._retry_s:
                return self.failure
            self.init_attempts += 1
            reason = self._init()
            if reason is None:
                self._initialized, self._failed_at, self.failure = True, None, None
            else:
                self._failed_at, self.failure = now, reason
            return reason

    def _init(self) -> str | None:
        try:
            module = importlib.import_module(MODULE)
        except ImportError:
            return "pyrsmi is not installed (pip install 'lpxtop[rocm]'; it needs ROCm 6 or newer)"
        except Exception as exc:  # noqa: BLE001 - a broken install is no reason to stop
            return f"pyrsmi failed to import: {type(exc).__name__}: {exc}"
        _quiet(module)
        init = getattr(module, "smi_initialize", None)
        if not callable(init):
            return "the installed pyrsmi has no smi_initialize: pip install --upgrade pyrsmi"
        try:
            init()
        except Exception as exc:  # noqa: BLE001 - no ROCm, no driver: "no AMD SMI", never a crash
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"AMD SMI could not start: {text[:200]}"
        self._module = module
        return None

    def call(self, function: str, *args: Any) -> Any:
        """``rocml.<function>(*args)``; None for -1, "", a missing function or any exception."""
        with self._lock:
            if not self._initialized or self._module is None:
                return None
            fn = getattr(self._module, function, None)
            if not callable(fn):
                return None
            try:
                value = fn(*args)
            except Exception:  # noqa: BLE001 - the wrapper's whole point
                return None
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, (int, float)) and value < 0:
            return None
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="replace")
        if isinstance(value, str):
            value = value.strip().rstrip("\x00")
            return value or None
        return value

    def count(self) -> int | None:
        value = self.call("smi_get_device_count")
        return int(value) if isinstance(value, int) else None

    def read(self, index: int) -> SmiReading:
        """Every figure of device `index` (each call guarded on its own)."""
        def num(value: Any) -> float | None:
            return float(value) if isinstance(value, (int, float)) else None

        def whole(value: Any) -> int | None:
            return int(value) if isinstance(value, (int, float)) else None

        util = num(self.call("smi_get_device_utilization", index))
        busy = num(self.call("smi_get_device_memory_busy", index))
        return SmiReading(
            name=self._text(self.call("smi_get_device_name", index)),
            uuid=self._text(self.call("smi_get_device_uuid", index)),
            bdf=whole(self.call("smi_get_device_pci_id", index)),
            mem_used=whole(self.call("smi_get_device_memory_used", index)),
            mem_total=whole(self.call("smi_get_device_memory_total", index)),
            util_pct=util if util is not None and util <= 100 else None,
            mem_busy_pct=busy if busy is not None and busy <= 100 else None,
            power_w=num(self.call("smi_get_device_average_power", index)),
        )

    @staticmethod
    def _text(value: Any) -> str | None:
        return value if isinstance(value, str) else None

    def close(self) -> None:
        """smi_shutdown if we initialised; idempotent, never raises."""
        if not self._lock.acquire(timeout=2.0):
            return
        try:
            if self._initialized and self._module is not None:
                try:
                    self._module.smi_shutdown()
                except Exception:  # noqa: BLE001
                    pass
            self._initialized = False
            self._closed = True
        finally:
            self._lock.release()
