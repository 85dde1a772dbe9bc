"""The one door to NVML: every call guarded, every failure turned into None plus one explanation.

pynvml (nvidia-ml-py) raises for everything: no driver, a function the installed driver lacks, a
value the GPU does not report, a GPU that fell off the bus. Callers here never see those
exceptions: `Nvml.query` returns None and records why in a `Problems`, worded so a user knows
what to do. The library is initialised lazily, once; a failed init is remembered and retried at
most every `retry_s` seconds, so a host without a driver costs nothing per tick.

Functions are looked up on the pynvml module at call time (not bound at import), which is also
what lets tests substitute the lowest layer with a fake driver.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

try:
    import pynvml as _pynvml
except ImportError:  # nvidia-ml-py is a dependency, but degrade rather than crash without it
    _pynvml = None

RETRY_INIT_S = 30.0

# Codes from nvml.h; literal so the module works even when pynvml is absent.
_SUCCESS = 0
_UNINITIALIZED = 1
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_TIMEOUT = 10
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_CORRUPTED_INFOROM = 14
_GPU_IS_LOST = 15
_RESET_REQUIRED = 16
_LIB_RM_VERSION_MISMATCH = 18
_NO_DATA = 21
_ARGUMENT_VERSION_MISMATCH = 25
_GPU_NOT_FOUND = 28

# After these the whole library needs a fresh nvmlInit (driver unloaded or reloaded under us).
_REINIT_CODES = frozenset({_UNINITIALIZED, _DRIVER_NOT_LOADED, _LIB_RM_VERSION_MISMATCH, _LIBRARY_NOT_FOUND})

_EXPLAIN: dict[int, str] = {
    _UNINITIALIZED: "NVML is not initialised (the driver was probably reloaded): lpxtop will retry",
    _NOT_SUPPORTED: "not supported on this GPU",
    _NO_PERMISSION: "permission denied: this user cannot query it (try as root or a user with access to /dev/nvidia*)",
    _NOT_FOUND: "not found",
    _DRIVER_NOT_LOADED: "NVIDIA driver not loaded: the nvidia kernel module is not running "
    "(check `nvidia-smi`; load the module or reboot)",
    _TIMEOUT: "the NVIDIA driver timed out",
    _LIBRARY_NOT_FOUND: "NVML library not found: no NVIDIA driver on this host (libnvidia-ml.so.1 is not installed)",
    _CORRUPTED_INFOROM: "the GPU's infoROM is corrupted: see `nvidia-smi -q` and contact the vendor",
    _GPU_IS_LOST: "GPU is lost (fell off the bus): check `dmesg` for Xid errors; the GPU needs a reset or a reboot",
    _RESET_REQUIRED: "GPU requires a reset: run `nvidia-smi -r` when it is idle, or reboot",
    _LIB_RM_VERSION_MISMATCH: "NVIDIA driver/library version mismatch (the driver was upgraded without "
    "reloading the kernel module): reboot, or reload the nvidia kernel modules",
    _NO_DATA: "no data yet",
    _ARGUMENT_VERSION_MISMATCH: "the driver does not know this version of the call: nvidia-ml-py is newer "
    "than the driver (update the driver or install an older nvidia-ml-py)",
    _GPU_NOT_FOUND: "GPU not found (removed or hidden)",
}

# Failures that say "this value does not exist here", not "something is wrong": with quiet=True they
# yield None without a note (e.g. MIG mode on a GPU without MIG, an empty MIG slot).
_ABSENT_CODES = frozenset(
    {_NOT_SUPPORTED, _NOT_FOUND, _FUNCTION_NOT_FOUND, _NO_DATA, _ARGUMENT_VERSION_MISMATCH}
)


def bindings_version() -> str:
    """The installed nvidia-ml-py version, for messages; "?" when unknown."""
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:
        return "?"


def _missing_function_text(name: str) -> str:
    return (
        f"{name} is missing from the installed NVIDIA driver (older than nvidia-ml-py {bindings_version()}): "
        "update the driver or install an nvidia-ml-py matching it"
    )


def error_code(exc: BaseException) -> int | None:
    """The NVML error code carried by a pynvml exception, None for anything else."""
    value = getattr(exc, "value", None)
    if _pynvml is not None and isinstance(exc, _pynvml.NVMLError) and isinstance(value, int):
        return value
    return None


def explain(exc: BaseException, function: str = "") -> str:
    """One line saying what went wrong and, where there is something to do, what to do."""
    code = error_code(exc)
    if code == _FUNCTION_NOT_FOUND or isinstance(exc, AttributeError):
        return _missing_function_text(function or "an NVML function")
    if _pynvml is not None and isinstance(exc, getattr(_pynvml, "NVMLLibraryMismatchError", ())):
        return _missing_function_text(function or "an NVML function")
    if code is not None:
        if code in _EXPLAIN:
            return _EXPLAIN[code]
        try:
            # str() may ask the library for the text; it is guarded but keep it off the happy path
            return f"NVML error {code}: {exc}"
        except Exception:
            return f"NVML error {code}"
    return f"unexpected {type(exc).__name__} from {function or 'NVML'}: {exc}"


class Problems:
    """Explanations gathered while reading one device (or the host), each kept once, in order."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.lost = False  # the GPU fell off the bus: stop asking it things

    def add(self, message: str) -> None:
        if message not in self.messages:
            self.messages.append(message)

    def as_tuple(self) -> tuple[str, ...]:
        return tuple(self.messages)


class Nvml:
    """Lazily initialised, thread-safe access to NVML; never raises.

    `clock` is injectable so tests can step past the retry delay without sleeping.
    """

    def __init__(self, *, retry_s: float = RETRY_INIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self._retry_s = retry_s
        self._clock = clock
        self._lock = threading.RLock()
        self._initialized = False
        self._closed = False
        self._failed_at: float | None = None
        self._failure: str | None = None
        self._missing: set[str] = set()  # functions the driver lacks: not asked again
        self.init_attempts = 0
        # Shut NVML down at interpreter exit even if the owner forgets close(); weak so the
        # hook does not keep a discarded wrapper alive.
        ref = weakref.ref(self)
        atexit.register(lambda: (obj := ref()) is not None and obj.close())

    @property
    def initialized(self) -> bool:
        return self._initialized

    def known_unavailable(self) -> bool:
        """True while `ensure()` would answer from memory: NVML is shut down, or failed and is not due for a retry."""
        with self._lock:
            if self._initialized:
                return False
            if self._closed:
                return True
            return self._failed_at is not None and self._clock() - self._failed_at < self._retry_s

    def ensure(self) -> str | None:
        """Initialise NVML if needed. None when ready, else why not (remembered for `retry_s`)."""
        with self._lock:
            if self._initialized:
                return None
            if self._closed:
                return "NVML was shut down"
            now = self._clock()
            if self._failed_at is not None and now - self._failed_at < self._retry_s:
                return self._failure
            self.init_attempts += 1
            reason = self._init()
            if reason is None:
                self._initialized = True
                self._failed_at = None
                self._failure = None
                self._missing.clear()
            else:
                self._failed_at = now
                self._failure = reason
            return reason

    def _init(self) -> str | None:
        if _pynvml is None:
            return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        init = getattr(_pynvml, "nvmlInit", None)
        if not callable(init):
            return (
                "the installed `pynvml` module is not nvidia-ml-py (it has no nvmlInit): "
                "pip install --force-reinstall nvidia-ml-py"
            )
        try:
            init()
        except Exception as exc:  # noqa: BLE001 - any failure means "no GPU data", never a crash
            return explain(exc, "nvmlInit")
        return None

    def invalidate(self, reason: str) -> None:
        """Forget the context after the driver went away under us; re-init after `retry_s`."""
        with self._lock:
            self._initialized = False
            self._failed_at = self._clock()
            self._failure = reason

    def query(
        self,
        function: str,
        *args: Any,
        problems: Problems | None = None,
        what: str = "",
        quiet: bool = False,
        variant: str = "",
    ) -> Any:
        """Call ``pynvml.<function>(*args)``; its value, or None with the reason added to `problems`.

        `what` names the value in the note ("power draw: not supported on this GPU"). With `quiet`,
        "does not exist here" failures (not supported, not found, function missing) add no note.
        GPU_IS_LOST sets `problems.lost`; codes meaning the driver went away invalidate the context.
        `variant` names a form of the call that the driver may lack on its own (pynvml maps
        ``nvmlDeviceGetMemoryInfo(h, nvmlMemory_v2)`` to another C function): a missing variant is
        remembered under ``function + variant``, so the plain form stays usable.
        """
        key = function + variant
        with self._lock:
            if not self._initialized or _pynvml is None:
                if problems is not None and self._failure:
                    problems.add(self._failure)
                return None
            if key in self._missing:
                if problems is not None and not quiet:
                    problems.add(self._labelled(what, _missing_function_text(function)))
                return None
            fn = getattr(_pynvml, function, None)
            if not callable(fn):
                self._missing.add(function)
                if problems is not None and not quiet:
                    problems.add(self._labelled(what, _missing_function_text(function)))
                return None
            try:
                value = fn(*args)
            except Exception as exc:  # noqa: BLE001 - the wrapper's whole point
                code = error_code(exc)
                missing = code == _FUNCTION_NOT_FOUND or isinstance(
                    exc, getattr(_pynvml, "NVMLLibraryMismatchError", ())
                )
                if missing:
                    self._missing.add(key)
                if problems is not None:
                    if code == _GPU_IS_LOST:
                        problems.lost = True
                    absent = missing or code in _ABSENT_CODES
                    if not (quiet and absent):
                        text = explain(exc, function)
                        # device-wide conditions read better without the value's label
                        labelled = code not in (_GPU_IS_LOST, _RESET_REQUIRED) and code not in _REINIT_CODES
                        problems.add(self._labelled(what, text) if labelled else text)
                if code in _REINIT_CODES:
                    self._initialized = False
                    self._failed_at = self._clock()
                    self._failure = explain(exc, function)
                return None
            if isinstance(value, bytes):
                value = value.decode("utf-8", errors="replace")
            return value

    @staticmethod
    def constant(name: str) -> Any:
        """A constant of the bindings (e.g. ``nvmlMemory_v2``); None when they lack it or are absent."""
        return getattr(_pynvml, name, None) if _pynvml is not None else None

    @staticmethod
    def _labelled(what: str, text: str) -> str:
        return f"{what}: {text}" if what else text

    def close(self) -> None:
        """nvmlShutdown if we initialised; idempotent, never raises."""
        # Do not wait forever on a worker stuck inside a driver call: skipping the shutdown is
        # harmless (the OS reclaims it), shutting down under a running call can crash.
        if not self._lock.acquire(timeout=2.0):
            return
        try:
            if self._initialized and _pynvml is not None:
                try:
                    _pynvml.nvmlShutdown()
                except Exception:  # noqa: BLE001
                    pass
            self._initialized = False
            self._closed = True
        finally:
            self._lock.release()
