"""A hybrid target's kernel blocks as the draft's attention reads them (``Scenario.kernel_block_size``).

A hybrid model (linear-attention layers beside full attention, Qwen3.5 / Qwen3.6) gets attention blocks as
large as its mamba state's page from vLLM, and vllm-ascend's attention kernels take blocks of 128 tokens: the
runner splits each block ``i`` into kernel blocks ``i*m .. i*m + m-1`` and hands attention, and its drafter, a
table of them (the V1 runner through its ``BlockTable``, the MRV2 runner through vLLM's ``BlockTables``). Each
adapter converts a call's table as its runner does; here is what the recording attention reads of one.

``splitting`` says, for a call and the captures its graphs replay, how many kernel blocks of how many tokens
each block is split into. ``fold`` gives back the blocks a kernel table reads: the tiny attention reads the
cache by the scheduler's blocks, which read the same slots as the kernel blocks only where each block's kernel
blocks are consecutive from ``i*m``; any other table fails, naming the request and the column (``check``).
"""

from __future__ import annotations

import contextlib

import torch

from sim.impls.kit.metadata_checks import MetadataMismatch

# the call now running: kernel blocks per block (1: none), the kernel block size, whether what is read is checked
_split = [1, 0, True]


def per_block() -> int:
    """Kernel blocks per block of the call now running (1: whole blocks)."""
    return _split[0]


@contextlib.contextmanager
def splitting(kernel_block_size: int, block_size: int, checked: bool = True):
    """Inside, the recording attention reads tables of ``kernel_block_size``-token kernel blocks of
    ``block_size``-token blocks (0: whole blocks): a call's, and the captures its graphs replay; ``checked``
    False for a capture's warm-up and dummy batch, no call's (its zeroed table read at ``max_model_len``)."""
    before = list(_split)
    if kernel_block_size:
        _split[:] = [block_size // kernel_block_size, kernel_block_size, checked]
    try:
        yield
    finally:
        _split[:] = before


def fold(table: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
    """The scheduler's blocks that ``table`` (kernel blocks, a call under ``splitting``) reads for each request's
    first ``seq_lens`` tokens (``check``); the table itself outside ``splitting``."""
    check(table, seq_lens)
    return on_device(table)


def on_device(table: torch.Tensor) -> torch.Tensor:
    """``fold``'s blocks by device ops alone, unchecked (a captured forward's: ``check`` after each replay)."""
    m = _split[0]
    return table if m == 1 else torch.div(table[:, ::m], m, rounding_mode="floor")


def check(table: torch.Tensor, seq_lens) -> None:
    """``MetadataMismatch`` where a kernel block ``table`` holds for one of a request's first ``seq_lens``
    tokens is not its block's own (under ``splitting``; nothing outside). A column of the row's padding past its
    blocks (-1, its whole block's), or past the row, is no kernel block: lengths reaching it are the lengths'
    fault, compared apart."""
    m, kernel, checked = _split
    if m == 1 or not checked:
        return
    rows = table.tolist()
    for r, n in enumerate(list(seq_lens)):
        for col in range(min(-(-int(n) // kernel), len(rows[r]))):  # past the row: the lengths' fault too
            first = rows[r][col - col % m]
            if first == rows[r][col] == -1:
                continue
            if first % m or rows[r][col] != first + col % m:
                raise MetadataMismatch(
                    f"request {r}: kernel block column {col} holds {rows[r][col]}, not kernel block "
                    f"{first - first % m + col % m} of its block's ({m} kernel blocks of {kernel} tokens per"
                    f" block): positions {col * kernel}..{col * kernel + kernel - 1} are read from another block"
                )
