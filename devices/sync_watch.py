"""Seeing every device-to-host synchronization a piece of code performs.

On an accelerator these calls block the host until the device catches up; in
the padded drafter path there must be none. Two torch hooks together see them
all: a ``TorchDispatchMode`` sees the aten ops that read a tensor back
(``_local_scalar_dense`` behind ``.item()`` and ``bool(t)``, ``nonzero`` and
boolean-mask indexing, ``masked_select``), and a ``TorchFunctionMode`` sees the
methods that read one back without an aten op (``.tolist()``, ``.cpu()``,
``.numpy()``, ``.item()``). On CPU every tensor is a host tensor, so the count
is of operations that would sync on a device, which is what matters.
"""

from __future__ import annotations

import os
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_ATEN_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "is_nonzero", "item"})
SYNC_METHODS = {
    torch.Tensor.tolist: "tolist",
    torch.Tensor.cpu: "cpu",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.item: "item",
}
_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(torch.__file__)


class HostSyncError(RuntimeError):
    """A host synchronization where none is allowed (inside a graph capture)."""


def caller_frame() -> traceback.FrameSummary | None:
    """The innermost frame outside torch and this package: the code that asked for the read."""
    for frame in reversed(traceback.extract_stack()):
        path = os.path.abspath(frame.filename)
        if not path.startswith((_HERE, _TORCH)) and "contextlib" not in path:
            return frame
    return None


def site_of(frame: traceback.FrameSummary | None) -> str:
    """``file:line`` of ``frame`` (``?`` for none)."""
    return f"{os.path.relpath(os.path.abspath(frame.filename))}:{frame.lineno}" if frame else "?"


def call_site() -> str:
    """``file:line`` of the innermost frame outside torch and this package."""
    return site_of(caller_frame())


def _is_bool_index(func, args) -> bool:
    if func.__name__.split(".")[0] not in ("index", "index_put", "index_put_"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices or ())


@dataclass
class SyncLog:
    """Host syncs seen, counted by (operation, call site); ``frames``: each site's frame (its
    function and source line, by which an implementation names the reads it makes of host tensors)."""

    counts: Counter = field(default_factory=Counter)
    forbid: str | None = None  # a reason: raise instead of counting
    muted: int = 0  # > 0 while the aten op behind an already-recorded method runs
    frames: dict = field(default_factory=dict)

    def record(self, op: str) -> None:
        if self.muted:
            return
        frame = caller_frame()
        site = site_of(frame)
        if self.forbid:
            raise HostSyncError(f"host sync '{op}' at {site} {self.forbid}")
        self.counts[(op, site)] += 1
        self.frames.setdefault(site, frame)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class SyncDispatchMode(TorchDispatchMode):
    """Records the aten ops that read a tensor back (``SyncLog.record``)."""

    def __init__(self, log: SyncLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in SYNC_ATEN_OPS:
            self.log.record(f"aten.{name}")
        elif _is_bool_index(func, args):
            self.log.record(f"aten.{name} (boolean mask)")
        return func(*args, **(kwargs or {}))


class SyncFunctionMode(TorchFunctionMode):
    """Records the tensor methods that read a tensor back without an aten op."""

    def __init__(self, log: SyncLog):
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = SYNC_METHODS.get(func)
        if name is not None:
            self.log.record(f"Tensor.{name}")
            # The aten op behind it (if any) is the same sync: count it once.
            self.log.muted += 1
            try:
                return func(*args, **(kwargs or {}))
            finally:
                self.log.muted -= 1
        return func(*args, **(kwargs or {}))


@contextmanager
def watch_host_syncs(forbid: str | None = None):
    """Yield a ``SyncLog`` of the host syncs inside the block.

    With ``forbid`` set, the first sync raises ``HostSyncError`` naming the
    operation, its call site and the reason instead.
    """
    log = SyncLog(forbid=forbid)
    with SyncFunctionMode(log), SyncDispatchMode(log):
        yield log
