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


_MESHES: dict[int, tuple] = {}


def mesh_groups(tp: int):
    """(PCP group, TP group) of this rank in a mesh of world_size / tp PCP ranks by ``tp`` TP ranks,
    rank = p * tp + t. Every rank must call it at the same point: each group is created by all."""
    if tp not in _MESHES:
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % tp:
            raise ValueError(f"tp={tp!r}: does not divide the world size {world}")
        pcp = world // tp
        pcp_groups = [dist.new_group([p * tp + t for p in range(pcp)]) for t in range(tp)]
        tp_groups = [dist.new_group([p * tp + t for t in range(tp)]) for p in range(pcp)]
        _MESHES[tp] = (pcp_groups[rank % tp], tp_groups[rank // tp])
    return _MESHES[tp]
