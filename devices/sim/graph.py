"""Graph capture and replay on CPU, with an NPU's rules.

Capture records every aten op run inside it; replay re-executes those ops on
the very tensors of the capture. So, as on hardware:

- new inputs must be ``copy_``-ed into the captured buffers: a name rebound to
  a fresh tensor is not seen (and is reported, when the caller declares its
  inputs, as a moved input);
- Python values (ints, lists) passed to ops are frozen at capture, unless a
  host parameter is rewritten with ``update_params``;
- a graph replays only at its captured size;
- a host sync inside the capture raises ``HostSyncError`` naming the op, and
  so does building a tensor from host data (a pageable host->device copy);
- a kernel the simulator does not see op by op (``launch``: an interpreted
  Triton kernel) is captured as one launch and runs again at each replay.

Where ``devices.sim.early_reads`` follows tensors' provenance (a tracker is on),
reading a host tensor back is no sync and making a host tensor from host data no
copy: the host code a capture runs through (metadata builders' lists) reads no
device. Every op is still recorded: a tensor the tracker does not know may stand
for a device's (the simulator's own). With no tracker on, every read is a sync.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten

from devices.base import GraphError
from devices.sim.early_reads import known_host, tracked_device
from devices.sim.host_params import host_param_op
from devices.sync_watch import SYNC_METHODS, HostSyncError, SyncDispatchMode, SyncFunctionMode, SyncLog, call_site

PAGEABLE_COPIES = {
    torch.tensor: "torch.tensor",
    torch.as_tensor: "torch.as_tensor",
    torch.from_numpy: "torch.from_numpy",
}


# Capture watches host syncs with the very modes that record and refuse copies: one Python call per
# op instead of two (a small op costs ~2 us eagerly, ~28 us recorded, ~51 us under four modes).
class _Recorder(SyncDispatchMode):
    def __init__(self, log: SyncLog, ops: list):
        super().__init__(log)
        self.ops = ops

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # a known host tensor read back (``item``) is the host's own work, no sync
        out = func(*args, **kwargs) if _host_work(args) else super().__torch_dispatch__(func, types, args, kwargs)
        # A view made at capture keeps aliasing the same storage; an in-place
        # view (squeeze_, t_) already changed the captured tensor's metadata.
        # An op that only may alias (``aten.to``, which inference mode leaves
        # undecomposed) is a view only when it returned one.
        if torch.Tag.inplace_view not in func.tags and not (func.is_view and _aliases(out, args)):
            self.ops.append([func, list(args), kwargs, out])
        return out


def _aliases(out, args) -> bool:
    """Whether ``out`` shares storage with a tensor argument."""
    if not isinstance(out, torch.Tensor):
        return True  # a view op's tuple of views (split, unbind): views
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args)


def _host_work(args) -> bool:
    """Whether an op's tensor arguments are all known host tensors (``known_host``), and there is one."""
    if tracked_device() is None:  # no tracker: none is known (and nothing is flattened per op)
        return False
    tensors = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
    return bool(tensors) and all(known_host(t) for t in tensors)


def _made_on_the_host(func, kwargs) -> bool:
    """Whether a tensor built from host data stays on the host, as a tracker tells (``tracked_device``):
    ``from_numpy``, or ``tensor`` / ``as_tensor`` given no device or another than the tracker's."""
    device = tracked_device()
    if device is None:  # no tracker: it may be a device's
        return False
    target = kwargs.get("device")
    return func is torch.from_numpy or target is None or torch.device(target) != device


class _NoPageableCopies(SyncFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = PAGEABLE_COPIES.get(func)
        if name is not None and not _made_on_the_host(func, kwargs):
            raise HostSyncError(f"pageable host->device copy '{name}' at {call_site()} inside a graph capture")
        if func in SYNC_METHODS and _host_work(args[:1]):  # a host tensor read back: no device involved
            return func(*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


def _copy_into(captured: torch.Tensor, result: torch.Tensor) -> None:
    # reshape only when needed: it costs about a third of a small op's replay
    captured.copy_(result if result.shape == captured.shape else result.reshape(captured.shape))


def _write_back(captured, result) -> None:
    """Put a replayed op's result where the capture's result lives; wait on a collective's handle."""
    if isinstance(result, torch.Tensor):  # most ops: skip flattening
        if captured is not result:
            _copy_into(captured, result)
        return
    outs, _ = tree_flatten(captured)
    news, _ = tree_flatten(result)
    for old, new in zip(outs, news):
        if isinstance(old, torch.Tensor) and old is not new:
            _copy_into(old, new)
    for item in news:
        if hasattr(item, "wait") and not isinstance(item, torch.Tensor):
            item.wait()  # a collective's work handle: the stream waits for it


class SimGraph:
    """The ops of one capture, replayed in order on the captured tensors."""

    def __init__(self, size: int, inputs: dict[str, torch.Tensor] | None):
        self.size = size
        self.ops: list = []
        self.inputs = {name: t.data_ptr() for name, t in (inputs or {}).items()}
        self.replays = 0

    def replay(self, size: int, inputs: dict[str, torch.Tensor] | None = None) -> None:
        if size != self.size:
            raise GraphError(f"replay at size {size}, but this graph was captured at size {self.size}")
        for name, t in (inputs or {}).items():
            if name not in self.inputs:
                raise GraphError(f"input '{name}' was not declared at capture")
            if t.data_ptr() != self.inputs[name]:
                raise GraphError(
                    f"input '{name}' moved: captured at {self.inputs[name]:#x}, replayed with {t.data_ptr():#x} "
                    "(copy_ new values into the captured buffer instead of rebinding it)"
                )
        with torch.no_grad():
            for func, args, kwargs, out in self.ops:
                _write_back(out, func(*args, **kwargs))
        self.replays += 1

    def update_params(self, **values: Any) -> None:
        found = set()
        for op in self.ops:
            if op[0] is host_param_op and op[1][0] in values:
                op[1][1] = list(values[op[1][0]])
                found.add(op[1][0])
        missing = set(values) - found
        if missing:
            raise GraphError(f"no host parameter named {sorted(missing)} in this graph")

    @property
    def num_ops(self) -> int:
        return len(self.ops)


_capturing: list[SimGraph] = []  # the graph being captured (captures do not nest)


@contextmanager
def capture(size: int, inputs: dict[str, torch.Tensor] | None = None):
    """Record the block's ops into a ``SimGraph`` of ``size`` rows."""
    graph = SimGraph(size, inputs)
    log = SyncLog(forbid="inside a graph capture")
    _capturing.append(graph)
    try:
        with _NoPageableCopies(log), _Recorder(log, graph.ops), torch.no_grad():
            yield graph
    finally:
        _capturing.pop()


class _Kernel:
    """A launch ``launch`` recorded: at replay, the kernel runs again with what it was launched with."""

    def __init__(self, run: Callable[[], None]):
        self.run = run

    def __call__(self) -> None:
        self.run()


def launch(run: Callable[[], None]) -> None:
    """Launch a kernel whose work the simulator does not see op by op (an interpreted Triton kernel reads
    and writes its tensors through host copies of its own): run now, and inside a capture recorded as one
    op that runs it again at each replay, on the same tensors with the same scalar arguments, as a device
    graph replays a captured kernel launch. What the kernel does inside is its own, never recorded."""
    if not _capturing:
        run()
        return
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        run()
    _capturing[-1].ops.append([_Kernel(run), [], {}, None])
