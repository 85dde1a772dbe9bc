"""AMD GPUs → GpuSnapshot: AMD SMI (pyrsmi) where installed, the amdgpu driver's sysfs files always.

The sysfs files need nothing installed and give every figure the panel shows (amd_sysfs.py); AMD SMI adds
the market name and the UUID, and its memory, activity and power figures stand where it answers. A device
is paired with its sysfs card by PCI address. Per-process VRAM comes from the DRM client stats in
/proc/<pid>/fdinfo (drm_fdinfo.py). Like the NVML collector, nothing here raises: a missing value is None
with a note where the user can do something about it, and a host without an AMD GPU is one status line,
remembered for `retry_s` seconds so it costs nothing per tick.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping

from lpxtop.engine.gpu.accel.amd_smi import AmdSmi, SmiReading
from lpxtop.engine.gpu.accel.amd_sysfs import (
    AmdCard,
    SysfsReading,
    find_cards,
    read_card,
    same_pci,
    sysfs_root,
)
from lpxtop.engine.gpu.accel.drm_fdinfo import DrmClients
from lpxtop.model.gpu import GpuDevice, GpuProcess, GpuSnapshot

RETRY_S = 30.0
NO_AMD = "no AMD GPU: /sys/class/drm lists no card of vendor 0x1002 (the amdgpu driver is not loaded, or there is none)"


class AmdGpuCollector:
    """Reads every AMD GPU once per `collect()`. `sysfs_root` stands for ``/`` (tests: a fake tree);
    `smi=None` with `use_smi=True` makes a pyrsmi door of its own."""

    def __init__(
        self,
        *,
        root: str | None = None,
        smi: AmdSmi | None = None,
        use_smi: bool = True,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = sysfs_root(root)
        self._smi = smi if smi is not None else (AmdSmi(retry_s=retry_s, clock=clock) if use_smi else None)
        self._retry_s = retry_s
        self._clock = clock
        self._absent_at: float | None = None
        self._clients = DrmClients(os.path.join(self.root, "proc"), clock=clock)

    def cheap(self) -> bool:
        """True when `collect()` would answer from memory (no AMD card, not yet due for a new look)."""
        return self._absent_at is not None and self._clock() - self._absent_at < self._retry_s

    def collect(self, endpoint_pids: Mapping[int, str] | None = None, first_index: int = 0) -> GpuSnapshot:
        """One reading of every AMD GPU, numbered from `first_index` (after the host's NVIDIA GPUs)."""
        try:
            return self._collect(first_index)
        except Exception as exc:  # noqa: BLE001 - a collector bug must not take the engine down
            return GpuSnapshot(status=f"unavailable: internal error reading AMD GPUs: {type(exc).__name__}: {exc}")

    def _collect(self, first_index: int) -> GpuSnapshot:
        if self.cheap():
            return GpuSnapshot(status=f"unavailable: {NO_AMD}")
        cards = find_cards(self.root)
        if not cards:
            self._absent_at = self._clock()
            return GpuSnapshot(status=f"unavailable: {NO_AMD}")
        self._absent_at = None
        notes: list[str] = []
        smi_by_card = self._smi_readings(cards, notes)
        clients = self._clients.by_pdev()
        devices = []
        for i, card in enumerate(cards):
            reading = read_card(card)
            devices.append(_device(first_index + i, card, reading, smi_by_card.get(card.card),
                                   clients.get(card.pci_address or "", {})))
        return GpuSnapshot(status="ok", devices=tuple(devices), collected_at=time.time(),
                           driver_version=_driver_version(self.root), notes=tuple(notes))

    def _smi_readings(self, cards: list[AmdCard], notes: list[str]) -> dict[str, SmiReading]:
        smi = self._smi
        if smi is None:
            return {}
        reason = smi.ensure()
        if reason is not None:
            notes.append(f"AMD SMI: {reason}; figures from the amdgpu sysfs files")
            return {}
        count = smi.count() or 0
        out: dict[str, SmiReading] = {}
        for index in range(min(count, 64)):
            reading = smi.read(index)
            card = next((c for c in cards if same_pci(reading.bdf, c.pci_address)), None)
            if card is None and count == len(cards):
                card = cards[index]  # no PCI address to pair by: the same count, the same order
            if card is not None:
                out[card.card] = reading
        return out

    def close(self) -> None:
        if self._smi is not None:
            self._smi.close()


def _device(index: int, card: AmdCard, fs: SysfsReading, smi: SmiReading | None,
            held: Mapping[int, int | None]) -> GpuDevice:
    s = smi or SmiReading()
    name = s.name or fs.name or (f"AMD GPU {fs.device_id}" if fs.device_id else "AMD GPU")
    uuid = s.uuid or (f"AMD-{fs.unique_id}" if fs.unique_id else (card.pci_address or card.card))
    processes = tuple(GpuProcess(pid=pid, name=None, used_bytes=used) for pid, used in sorted(held.items()))
    return GpuDevice(
        index=index,
        name=name if name.upper().startswith("AMD") else f"AMD {name}",
        uuid=uuid,
        util_pct=_first(s.util_pct, fs.busy_pct),
        mem_util_pct=_first(s.mem_busy_pct, fs.mem_busy_pct),
        mem_used_bytes=_first(s.mem_used, fs.vram_used),
        mem_total_bytes=_first(s.mem_total, fs.vram_total),
        temp_c=fs.temp_c,
        power_w=_first(s.power_w, fs.power_w),
        power_limit_w=fs.power_cap_w,
        processes=processes,
        notes=tuple(fs.notes),
        vendor="amd",
        energy_j=fs.energy_j,
    )


def _first(*values):
    return next((v for v in values if v is not None), None)


def _driver_version(root: str) -> str | None:
    """The amdgpu module's version (DKMS builds from ROCm have one; the in-tree driver does not)."""
    try:
        with open(os.path.join(root, "sys", "module", "amdgpu", "version"), encoding="ascii", errors="replace") as f:
            version = f.read(64).strip()
    except OSError:
        return "amdgpu"
    return f"amdgpu {version}" if version else "amdgpu"
