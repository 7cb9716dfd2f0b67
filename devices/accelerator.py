"""``cuda`` and ``npu``: one implementation over ``torch.cuda`` / ``torch.npu``.

torch_npu is imported only when the npu device is asked for. Without CANN its
import fails (``libhccl.so`` missing); once installed, torch's backend
autoload would import it from ``import torch`` itself, so the variable
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before torch is imported here.
"""

from __future__ import annotations

import importlib
import os

import torch

from devices.base import DeviceUnavailable
from devices.sync_watch import watch_host_syncs


class AcceleratorDevice:
    """A torch accelerator reached through ``torch.<kind>``."""

    kind: str

    def __init__(self) -> None:
        self.module = self._load_module()
        if not self.module.is_available():
            raise DeviceUnavailable(self.name, f"torch.{self.kind}.is_available() is False on this machine")
        self.torch_device = torch.device(self.kind, self.module.current_device())

    @property
    def name(self) -> str:
        return self.kind

    def _load_module(self):
        return getattr(torch, self.kind)

    def synchronize(self) -> None:
        self.module.synchronize()

    def watch_host_syncs(self, forbid: str | None = None):
        return watch_host_syncs(forbid)

    def describe(self) -> str:
        return f"{self.kind} ({self.module.get_device_name(self.torch_device)}, torch {torch.__version__})"


class CudaDevice(AcceleratorDevice):
    kind = "cuda"


class NpuDevice(AcceleratorDevice):
    kind = "npu"

    def _load_module(self):
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        try:
            importlib.import_module("torch_npu")
        except Exception as exc:  # ImportError, or OSError from a missing CANN library
            raise DeviceUnavailable("npu", f"import torch_npu failed: {type(exc).__name__}: {exc}") from exc
        return torch.npu
