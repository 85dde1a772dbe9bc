"""A fake amdgpu sysfs (and /proc) tree in a temporary directory, and a fake pyrsmi on disk: the lowest
layers the AMD readers touch, laid out as the kernel and the package lay them out."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

GIB = 2**30


def card(root: Path, n: int, pci: str, *, vendor: str = "0x1002", files: dict | None = None,
         hwmon: dict | None = None, hwmon_name: str = "amdgpu") -> Path:
    """sys/class/drm/cardN whose `device` links to sys/devices/.../<pci> holding `files`; hwmon under it."""
    device = root / "sys" / "devices" / "pci0000:00" / pci
    device.mkdir(parents=True, exist_ok=True)
    (device / "vendor").write_text(vendor + "\n")
    for name, value in (files or {}).items():
        path = device / name
        if value is IsADirectoryError:
            path.mkdir()  # a file that cannot be read
        else:
            path.write_text(f"{value}\n")
    if hwmon is not None:
        h = device / "hwmon" / f"hwmon{n + 2}"
        h.mkdir(parents=True)
        (h / "name").write_text(hwmon_name + "\n")
        for name, value in hwmon.items():
            (h / name).write_text(f"{value}\n")
    drm = root / "sys" / "class" / "drm" / f"card{n}"
    drm.mkdir(parents=True)
    os.symlink(device, drm / "device")
    (root / "sys" / "class" / "drm" / f"card{n}-DP-1").mkdir()  # a connector: not a card
    return device


def mi300x(root: Path, n: int = 0, pci: str = "0000:c1:00.0", **over) -> Path:
    files = {
        "product_name": "AMD Instinct MI300X",
        "unique_id": "4f1a2b3c4d5e6f70",
        "device": "0x74a1",
        "mem_info_vram_total": 192 * GIB,
        "mem_info_vram_used": 150 * GIB,
        "gpu_busy_percent": 87,
        "mem_busy_percent": 41,
        **over.pop("files", {}),
    }
    hwmon = {
        "power1_input": 612_000_000,  # µW (MI300: no power1_average)
        "power1_cap": 750_000_000,
        "temp1_input": 71_000, "temp1_label": "junction",  # m°C; no edge sensor on MI300
        "temp3_input": 60_000, "temp3_label": "mem",
        "energy1_input": 9_876_543_210_000,  # µJ
        **over.pop("hwmon", {}),
    }
    return card(root, n, pci, files=files, hwmon=hwmon, **over)


def drm_client(root: Path, pid: int, fd: int, pdev: str, client_id: int, vram: str,
               driver: str = "amdgpu", key: str = "drm-resident-vram") -> None:
    """/proc/<pid>/fd/<fd> → /dev/dri/renderD128, with the DRM client stats in fdinfo."""
    fd_dir = root / "proc" / str(pid) / "fd"
    info_dir = root / "proc" / str(pid) / "fdinfo"
    fd_dir.mkdir(parents=True, exist_ok=True)
    info_dir.mkdir(parents=True, exist_ok=True)
    os.symlink("/dev/dri/renderD128", fd_dir / str(fd))
    (info_dir / str(fd)).write_text(textwrap.dedent(f"""\
        pos:\t0
        flags:\t02100002
        drm-driver:\t{driver}
        drm-client-id:\t{client_id}
        drm-pdev:\t{pdev}
        drm-total-vram:\t{vram}
        {key}:\t{vram}
        drm-engine-gfx:\t123 ns
        """))


PYRSMI = '''\
"""A stand-in for pyrsmi.rocml written to disk for the tests: the same function names, -1 and "" on
errors, and logging.error on the root logger, as pyrsmi 1.1.0 does."""
import logging

DEVICES = []          # dicts: name, uuid, bdf, used, total, util, busy, power
INIT_ERROR = None
calls = []


def smi_initialize():
    calls.append("smi_initialize")
    if INIT_ERROR is not None:
        raise INIT_ERROR


def smi_shutdown():
    calls.append("smi_shutdown")


def smi_get_device_count():
    return len(DEVICES)


def _get(dev, key):
    value = DEVICES[dev].get(key, -1)
    if value == -1:
        logging.error("Error getting %s for device %s", key, dev)
    return value


def smi_get_device_name(dev):
    return DEVICES[dev].get("name", "")


def smi_get_device_uuid(dev, format="roc"):
    return DEVICES[dev].get("uuid", "")


def smi_get_device_pci_id(dev):
    return _get(dev, "bdf")


def smi_get_device_memory_used(dev, type="VRAM"):
    return _get(dev, "used")


def smi_get_device_memory_total(dev, type="VRAM"):
    return _get(dev, "total")


def smi_get_device_utilization(dev):
    return _get(dev, "util")


def smi_get_device_memory_busy(dev):
    return _get(dev, "busy")


def smi_get_device_average_power(dev):
    return _get(dev, "power")
'''


def install_pyrsmi(tmp_path: Path, monkeypatch):
    """Write the stand-in as a package `pyrsmi` on sys.path and return its `rocml` module."""
    pkg = tmp_path / "site" / "pyrsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rocml.py").write_text(PYRSMI)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in ("pyrsmi", "pyrsmi.rocml"):
        monkeypatch.setitem(sys.modules, name, None)  # so that teardown removes what the test imports
        del sys.modules[name]
    import importlib

    return importlib.import_module("pyrsmi.rocml")
