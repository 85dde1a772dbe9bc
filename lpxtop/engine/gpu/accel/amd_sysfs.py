"""AMD GPUs from the amdgpu driver's sysfs files: nothing to install, readable by every user.

Every file read here, as the Linux kernel documents it:

- ``/sys/class/drm/cardN/device/vendor``: the PCI vendor id, ``0x1002`` for AMD (ATI).
- ``mem_info_vram_total`` / ``mem_info_vram_used``: "the total amount of VRAM" / "the total amount of
  currently used VRAM", in bytes (Documentation/gpu/amdgpu/driver-misc.rst; DOC blocks in
  drivers/gpu/drm/amd/amdgpu/amdgpu_vram_mgr.c).
- ``gpu_busy_percent`` / ``mem_busy_percent``: "how busy the GPU [the VRAM] is as a percentage", computed by
  the SMU firmware from the IP cores' activity (Documentation/gpu/amdgpu/thermal.rst; DOC: gpu_busy_percent,
  mem_busy_percent in drivers/gpu/drm/amd/pm/amdgpu_pm.c).
- ``product_name`` (the board's FRU EEPROM, on some boards) and ``unique_id`` (driver-misc.rst).
- ``hwmon/hwmonM/`` (the one whose ``name`` is ``amdgpu``; DOC: hwmon in amdgpu_pm.c):
  ``power1_average`` "average power used by the SoC in microWatts", ``power1_input`` "instantaneous power
  used by the SoC in microWatts" (on APUs both include the CPU), ``power1_cap`` "selected power cap in
  microWatts", ``temp[1-3]_input`` "the on die GPU temperature in millidegrees Celsius" with
  ``temp[1-3]_label`` (edge, junction, mem; temp2/temp3 on SOC15 dGPUs only).
- ``energy1_input``: hwmon's "cumulative energy use" in microjoules (Documentation/hwmon/sysfs-interface.rst);
  amdgpu does not document one, so it is read only where present (None elsewhere: energy per token then
  integrates the power readings, engine/gpu/accel/energy.py).

A file that is missing is a value the card does not have (None, no note); one that cannot be read (a GPU
in reset answers EPERM, a permission) is None with a note. The root (``/`` normally) is a parameter, or
``LPXTOP_SYSFS_ROOT``, so tests read a fake tree in a temporary directory.
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field

SYSFS_ROOT_ENV = "LPXTOP_SYSFS_ROOT"
AMD_VENDOR_ID = 0x1002
_CARD = re.compile(r"card(\d+)$")  # not the connectors (card0-DP-1 ...)
_TEMP_LABELS = ("edge", "junction", "hotspot")  # the die temperature, in the order it is preferred
MAX_CARDS = 64


def sysfs_root(root: str | None = None) -> str:
    """The directory standing for ``/``: `root`, else $LPXTOP_SYSFS_ROOT, else ``/``."""
    return root if root is not None else os.environ.get(SYSFS_ROOT_ENV) or "/"


@dataclass(frozen=True)
class AmdCard:
    """One AMD GPU as the DRM class lists it."""

    card: str  # "card0"
    device_dir: str  # .../sys/class/drm/card0/device
    pci_address: str | None  # "0000:c1:00.0", from where the device link points
    hwmon_dir: str | None  # .../device/hwmon/hwmon3 (name "amdgpu"), None when the card has none


@dataclass
class SysfsReading:
    """What the files said about one card; None where a file is absent or unreadable."""

    name: str | None = None
    unique_id: str | None = None
    device_id: str | None = None
    vram_used: int | None = None
    vram_total: int | None = None
    busy_pct: float | None = None
    mem_busy_pct: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    temp_c: float | None = None
    energy_j: float | None = None
    notes: list[str] = field(default_factory=list)


def find_cards(root: str | None = None) -> list[AmdCard]:
    """Every DRM card whose PCI vendor is AMD, in card order; [] when there is none (or no sysfs)."""
    drm = os.path.join(sysfs_root(root), "sys", "class", "drm")
    try:
        names = os.listdir(drm)
    except OSError:
        return []
    cards = sorted((int(m.group(1)), n) for n in names if (m := _CARD.match(n)))
    found: list[AmdCard] = []
    seen: set[str] = set()
    for _, name in cards[:MAX_CARDS]:
        device_dir = os.path.join(drm, name, "device")
        vendor = _read_text(os.path.join(device_dir, "vendor"))
        if vendor is None or _int(vendor, 16) != AMD_VENDOR_ID:
            continue
        real = os.path.realpath(device_dir)
        if real in seen:
            continue
        seen.add(real)
        pci = os.path.basename(real)
        found.append(AmdCard(name, device_dir, pci if ":" in pci else None, _amdgpu_hwmon(device_dir)))
    return found


def _amdgpu_hwmon(device_dir: str) -> str | None:
    base = os.path.join(device_dir, "hwmon")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return None
    for entry in entries:
        path = os.path.join(base, entry)
        if (_read_text(os.path.join(path, "name")) or "").strip() == "amdgpu":
            return path
    return None


def read_card(card: AmdCard) -> SysfsReading:
    """One reading of every figure the card's files hold."""
    out = SysfsReading()
    d = card.device_dir

    def value(path: str, what: str) -> str | None:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                return f.read(4096).strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV, errno.EOPNOTSUPP, errno.EINVAL):
                return None  # the card does not have it (or not now)
            out.notes.append(f"{what}: {_explain(exc, path)}") if len(out.notes) < 8 else None
            return None

    def number(path: str, what: str, scale: float = 1.0) -> float | None:
        text = value(path, what)
        return None if text is None else _float(text, scale)

    out.name = (value(os.path.join(d, "product_name"), "name") or None)
    out.unique_id = value(os.path.join(d, "unique_id"), "unique id") or None
    out.device_id = value(os.path.join(d, "device"), "device id") or None
    used = number(os.path.join(d, "mem_info_vram_used"), "memory used")
    total = number(os.path.join(d, "mem_info_vram_total"), "memory total")
    out.vram_used = int(used) if used is not None else None
    out.vram_total = int(total) if total is not None else None
    out.busy_pct = _pct(number(os.path.join(d, "gpu_busy_percent"), "utilization"))
    out.mem_busy_pct = _pct(number(os.path.join(d, "mem_busy_percent"), "memory busy"))
    h = card.hwmon_dir
    if h is not None:
        out.power_w = number(os.path.join(h, "power1_average"), "power draw", 1e-6)
        if out.power_w is None:
            out.power_w = number(os.path.join(h, "power1_input"), "power draw", 1e-6)
        out.power_cap_w = number(os.path.join(h, "power1_cap"), "power cap", 1e-6) or None
        out.energy_j = number(os.path.join(h, "energy1_input"), "energy", 1e-6)
        out.temp_c = _temperature(h, value)
    return out


def _temperature(hwmon: str, value) -> float | None:
    """The die temperature: the channel labelled edge, else junction (MI300 has no edge sensor), else temp1."""
    by_label: dict[str, float] = {}
    first: float | None = None
    for i in (1, 2, 3):
        reading = value(os.path.join(hwmon, f"temp{i}_input"), "temperature")
        temp = _float(reading, 0.001) if reading is not None else None
        if temp is None:
            continue
        first = temp if first is None else first
        label = (value(os.path.join(hwmon, f"temp{i}_label"), "temperature") or "").lower()
        by_label.setdefault(label, temp)
    for label in _TEMP_LABELS:
        if label in by_label:
            return by_label[label]
    return first


def _explain(exc: OSError, path: str) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        # amdgpu answers EPERM while the GPU is in reset or suspended, as well as for a permission
        return f"{os.path.basename(path)} could not be read ({exc.strerror}): the GPU may be in reset, or this user may not read it"
    if exc.errno == errno.EIO:
        return f"{os.path.basename(path)}: I/O error from the driver (check `dmesg` for amdgpu errors)"
    return f"{os.path.basename(path)}: {exc.strerror or type(exc).__name__}"


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(256).strip()
    except OSError:
        return None


def _int(text: str, base: int = 10) -> int | None:
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _float(text: str, scale: float = 1.0) -> float | None:
    try:
        value = float(text.split()[0]) * scale
    except (ValueError, IndexError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def _pct(value: float | None) -> float | None:
    return value if value is not None and 0.0 <= value <= 100.0 else None


def same_pci(bdf: object, pci_address: str | None) -> bool:
    """Whether AMD SMI's 64-bit BDF names the PCI address "0000:c1:00.0". pyrsmi encodes the domain
    either as amdsmi_bdf_t does (bits 16 and up) or as rocm_smi did (bits 32 and up): either matches."""
    if isinstance(bdf, bool) or not isinstance(bdf, int) or bdf < 0 or not pci_address:
        return False
    m = re.fullmatch(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])", pci_address)
    if m is None:
        return False
    domain, bus, dev, fn = (int(g, 16) for g in m.groups())
    if bdf & 0xFFFF != (bus << 8) | (dev << 3) | fn:
        return False
    return bdf >> 16 == domain or bdf >> 32 == domain
