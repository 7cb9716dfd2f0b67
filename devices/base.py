"""The interface between the proposer core and the hardware it runs on.

What differs between devices: placement, pinned host buffers, host<->device
copies (blocking or not) with events, synchronization, graph capture and
replay with a shared pool, the update of host-side parameters baked into a
captured graph, and process groups for collectives.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import torch

from devices.sync_watch import SyncLog


class DeviceUnavailable(RuntimeError):
    """The device cannot run on this machine; the message names the cause."""

    def __init__(self, name: str, cause: str):
        super().__init__(f"device '{name}' is unavailable: {cause}")
        self.name = name
        self.cause = cause


class GraphError(RuntimeError):
    """A graph was used in a way the hardware would not allow (or would get wrong)."""


class Event(Protocol):
    def synchronize(self) -> None:
        """Block the host until the work recorded before this event is done."""


class Graph(Protocol):
    """A captured sequence of device work, replayed on the same buffers."""

    size: int

    def replay(self, size: int, inputs: dict[str, torch.Tensor] | None = None) -> None:
        """Rerun the captured work; ``size`` and ``inputs`` must be those of the capture."""

    def update_params(self, **values: Any) -> None:
        """Change host-side parameters baked in at capture (NPU ``graph_task_update``)."""


@runtime_checkable
class Device(Protocol):
    """What differs between hardware, as the proposer core sees it."""

    name: str
    torch_device: torch.device
    supports_graphs: bool
    supports_param_update: bool
    max_ranks: int  # PCP ranks this machine can host, one device each

    def describe(self) -> str:
        """One line for a report header."""

    def synchronize(self) -> None:
        """Wait until all queued device work is done (and pending copies landed)."""

    def pinned(self, shape, dtype: torch.dtype) -> torch.Tensor:
        """A page-locked host buffer, the only legal source or target of a non-blocking copy."""

    def to_host(self, src: torch.Tensor, out: torch.Tensor, non_blocking: bool = False) -> Event:
        """Copy ``src`` into the host buffer ``out``; with ``non_blocking`` it is valid only after the event."""

    def graph_pool(self) -> Any:
        """A memory pool handle that graphs captured with it share."""

    def capture(
        self, size: int, pool: Any = None, inputs: dict[str, torch.Tensor] | None = None
    ) -> AbstractContextManager[Graph]:
        """Capture the work inside the block into a graph of ``size`` rows; ``inputs`` are the static buffers."""

    def host_param(self, name: str, values: list[int]) -> torch.Tensor:
        """A host-side list as an int64 device tensor; inside a capture, frozen until ``update_params``."""

    def watch_host_syncs(self, forbid: str | None = None) -> AbstractContextManager[SyncLog]:
        """Count (or, with ``forbid``, refuse) device-to-host syncs inside a block."""
