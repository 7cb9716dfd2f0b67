"""A hybrid target's kernel blocks (``Scenario.kernel_block_size``): the runner's block table in units
smaller than the scheduler's blocks, as every Qwen3.5 / Qwen3.6 MTP deployment has it.

A hybrid model (linear-attention layers beside full attention) gets attention blocks as large as its mamba
state's page from vLLM, and vllm-ascend's attention kernels take blocks of 128 tokens: the runner splits each
block into kernel blocks (``select_common_block_size`` per KV-cache group, then vllm-ascend's ``BlockTable``,
whose ``_convert_physical_to_logical_blocks`` turns block ``i`` into kernel blocks ``i*m .. i*m + m-1``) and
hands attention, and its drafter, a table of kernel blocks. The drafter computes each draft step's slots from
that table, so it must index it with the kernel block size: vllm-ascend's does where its constructor found
linear-attention layers (``check_gdn_layer``: ``has_gdn``, since #12000; before, always), and a drafter that
takes the scheduler's block size there writes and reads other slots (the class of #7019, Qwen3.5's MTP).

``split`` runs a call as such a runner: the batch's table converted by the checkout's own conversion, the
drafter's ``kernel_block_size`` the kernel block (what ``load_model`` takes from the draft backend) and its
``has_gdn`` what ``check_gdn_layer`` finds for a hybrid model's config; the recording attention reads the
table back as the blocks it reads (``sim.impls.kit.ascend.kernel_blocks``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.ascend.kernel_blocks import per_block, splitting

# what check_gdn_layer reads of a hybrid model's config: its layers' types (Qwen3.5's: linear and full attention)
HYBRID_CONFIG = SimpleNamespace(
    model_config=SimpleNamespace(hf_config=SimpleNamespace(layer_types=["linear_attention", "full_attention"]))
)


def _to_kernel_blocks(table: torch.Tensor, m: int) -> torch.Tensor:
    """``table``'s blocks as the runner's ``BlockTable`` holds them: each row's blocks through the checkout's
    ``_convert_physical_to_logical_blocks`` (-1 past a row's blocks, as the batch has it, for every kernel
    column)."""
    convert = import_ascend("vllm_ascend.worker.block_table").BlockTable._convert_physical_to_logical_blocks
    holder = SimpleNamespace(use_hybrid_blocks=True, blocks_per_phys_block=m)
    rows = []
    for row in table.tolist():
        live = [b for b in row if b >= 0]
        kernel = [int(b) for b in convert(holder, np.asarray(live, dtype=np.int64))] if live else []
        rows.append(kernel + [-1] * (len(row) * m - len(kernel)))
    return torch.tensor(rows, dtype=table.dtype, device=table.device).reshape(table.shape[0], table.shape[1] * m)


@contextlib.contextmanager
def split(proposer, batch, kernel_block_size: int, block_size: int):
    """Inside, ``proposer`` drafts for a hybrid target whose ``block_size``-token blocks are split into
    ``kernel_block_size``-token kernel blocks (0: none); yields ``batch`` with the runner's table of them."""
    if not kernel_block_size:
        yield batch
        return
    saved = {name: getattr(proposer, name, None) for name in ("kernel_block_size", "has_gdn")}
    proposer.kernel_block_size = kernel_block_size
    proposer.has_gdn = import_ascend("vllm_ascend.utils").check_gdn_layer(HYBRID_CONFIG)
    try:
        with splitting(kernel_block_size, block_size):
            yield dataclasses.replace(batch, block_table=_to_kernel_blocks(batch.block_table, per_block()))
    finally:
        for name, value in saved.items():
            setattr(proposer, name, value)
