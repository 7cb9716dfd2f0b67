"""Pinned host memory on the simulator: a plain copy (plumbing for vllm-ascend's builds and samplers).

vllm-ascend's metadata builders copy host lengths to the device through ``pin_memory()``, which needs the NPU's
host allocator, its MLA builder its chunked context's lengths through ``Tensor.npu()``, which torch_npu adds, and
its rejection sampler makes ``torch.tensor(..., pin_memory=True)`` buffers; vLLM's Model Runner V2 keeps request
states in UVA buffers (host memory the device reads in place). On the simulator host memory is the device's: pinning
is a copy, ``.npu()`` a copy to the proposer's device, and a UVA buffer's device view the host tensor itself.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.ascend.world import build_device
from sim.impls.kit.in_place import in_place_of

_FACTORIES = ("tensor", "arange", "empty", "zeros", "ones", "full")


def _unpinned(factory):
    return functools.wraps(factory)(lambda *args, pin_memory=False, **kwargs: factory(*args, **kwargs))


@contextlib.contextmanager
def unpinned_host_memory():
    """``Tensor.pin_memory`` as a copy, the factories' ``pin_memory=True`` ignored and ``Tensor.npu()`` a
    copy to the proposer's device, inside the block: on the simulator host memory is the device's."""
    saved = {name: getattr(torch, name) for name in _FACTORIES}
    pin, npu = torch.Tensor.pin_memory, vars(torch.Tensor).get("npu")
    device = build_device()
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self.clone()
    torch.Tensor.npu = lambda self, *args, **kwargs: self.to(device)
    for name, factory in saved.items():
        setattr(torch, name, _unpinned(factory))
    try:
        yield
    finally:
        torch.Tensor.pin_memory = pin
        if npu is None:
            del torch.Tensor.npu
        else:
            torch.Tensor.npu = npu
        for name, factory in saved.items():
            setattr(torch, name, factory)


@contextlib.contextmanager
def host_memory_as_uva():
    """vLLM's ``UvaBuffer`` (host memory the device reads in place) as a host tensor whose device view is itself:
    on the simulator host memory is the device's. For the block only."""
    module = import_ascend("vllm.v1.worker.gpu.buffer_utils")  # vLLM Model Runner V2's

    class UvaBuffer:
        def __init__(self, size, dtype: torch.dtype):
            self.cpu = torch.zeros(size, dtype=dtype)
            self.np = self.cpu.numpy()
            self.uva = self.cpu

    with in_place_of(module, "UvaBuffer", UvaBuffer):
        yield
