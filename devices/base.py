"""The interface between the proposer core and the hardware it runs on."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import torch

from devices.sync_watch import SyncLog


class DeviceUnavailable(RuntimeError):
    """The device cannot run on this machine; the message names the cause."""

    def __init__(self, name: str, cause: str):
        super().__init__(f"device '{name}' is unavailable: {cause}")
        self.name = name
        self.cause = cause


@runtime_checkable
class Device(Protocol):
    """What differs between hardware, as the proposer core sees it."""

    name: str
    torch_device: torch.device

    def synchronize(self) -> None:
        """Wait until all queued device work is done."""

    def watch_host_syncs(self, forbid: str | None = None) -> AbstractContextManager[SyncLog]:
        """Count (or, with ``forbid``, refuse) device-to-host syncs inside a block."""
