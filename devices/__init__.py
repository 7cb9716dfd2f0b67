"""Devices the proposer runs on, found by name without importing them.

Built-in backends: ``sim`` (the strict CPU simulator), ``cuda`` and ``npu``.
Outside packages add one through the ``mtp_harness.devices`` entry-point
group (``name = "package.module:Factory"``). Nothing is imported until a
device is asked for, so importing this package has no side effects.
"""

from __future__ import annotations

from devices.base import Device, DeviceUnavailable
from devices.plugins import load_factory, registry

ENTRY_POINT_GROUP = "mtp_harness.devices"
BUILTIN = {
    "sim": "devices.sim:SimDevice",
    "cuda": "devices.accelerator:CudaDevice",
    "npu": "devices.accelerator:NpuDevice",
}

__all__ = ["Device", "DeviceUnavailable", "available_names", "load_device"]


def available_names() -> list[str]:
    """Names that ``load_device`` knows (available or not on this machine)."""
    return sorted(registry(ENTRY_POINT_GROUP, BUILTIN))


def load_device(name: str) -> Device:
    """The device called ``name``; ``DeviceUnavailable`` names the cause if it cannot run here."""
    return load_factory(ENTRY_POINT_GROUP, BUILTIN, name, DeviceUnavailable)()
