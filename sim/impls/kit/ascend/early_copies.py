"""The simulator's early-read check over vllm-ascend's own code, around each propose call.

vllm-ascend makes its host copies itself (``t.to("cpu", non_blocking=True)``, ``host.copy_(t,
non_blocking=True)``), not through the ``Device`` API, so ``SimDevice.to_host``'s poison alone would
not see a read of one before its sync (bug class 6, vllm-ascend#4254). ``checked`` turns on
``devices.sim.early_reads`` for the call: such a copy holds poison until ``torch.npu.synchronize()``,
a stream's ``synchronize()`` or a ``torch.npu.Event`` recorded after it (``fake_npu_graphs``). The
proposer's buffers are device tensors by their construction on ``cpu:0`` (``build``); the call's
inputs (the batch's and the sampled tokens' tensors) are named here.
"""

from __future__ import annotations

import contextlib

import torch

from devices.sim import early_reads


def _tensors(*values):
    for value in values:
        yield from (t for t in vars(value).values() if isinstance(t, torch.Tensor))


def checked(device, *inputs):
    """The check for one propose call on ``device`` (the simulator only: on an NPU the copies are real)."""
    if not getattr(device, "poisons_unsynced_copies", False) or not hasattr(device, "event"):
        return contextlib.nullcontext()
    return early_reads.tracking(device, *_tensors(*inputs))
