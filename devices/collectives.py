"""Process groups for prefill context parallel, one backend per device kind.

gloo on CPU (the simulator: each rank a real process), NCCL on CUDA, HCCL on
NPU. ``all_gather_rows`` concatenates every rank's rows in rank order; it uses
``all_gather`` into a list rather than ``all_gather_into_tensor``, which
torch 2.13+ reports as deprecated.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

BACKEND = {"sim": "gloo", "cuda": "nccl", "npu": "hccl"}


def init_group(device_name: str, rank: int, world_size: int, init_method: str, timeout_s: float):
    """Join the default process group of ``world_size`` ranks; return it."""
    backend = BACKEND.get(device_name, "gloo")
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return dist.group.WORLD


def all_gather_rows(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """[R, ...] on each of P ranks -> [P * R, ...], rank 0's rows first."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts)
