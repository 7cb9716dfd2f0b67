"""Devices the proposer runs on, found by name without importing them.

Built-in backends: ``sim`` (the strict CPU simulator), ``cuda`` and ``npu``.
Outside packages add one through the ``mtp_harness.devices`` entry-point
group (``name = "package.module:Factory"``). Nothing is imported until a
device is asked for, so importing this package has no side effects.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from devices.base import Device, DeviceUnavailable

ENTRY_POINT_GROUP = "mtp_harness.devices"
BUILTIN = {
    "sim": "devices.sim:SimDevice",
    "cuda": "devices.accelerator:CudaDevice",
    "npu": "devices.accelerator:NpuDevice",
}

__all__ = ["Device", "DeviceUnavailable", "available_names", "load_device"]


def _registry() -> dict[str, str]:
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def available_names() -> list[str]:
    """Names that ``load_device`` knows (available or not on this machine)."""
    return sorted(_registry())


def load_device(name: str) -> Device:
    """The device called ``name``; ``DeviceUnavailable`` names the cause if it cannot run here."""
    registry = _registry()
    if name not in registry:
        raise DeviceUnavailable(name, f"unknown device; known: {', '.join(sorted(registry))}")
    module_name, _, attr = registry[name].partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise DeviceUnavailable(name, f"cannot import {registry[name]}: {exc}") from exc
    return factory()
