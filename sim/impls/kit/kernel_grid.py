"""The grid vllm-ascend's spec-decode Triton kernel is launched on here: one where every program laps.

``prepare_inputs_padded`` launches ``prepare_inputs_padded_kernel`` on
``min(cdiv(num_reqs, BLOCK), vector cores)`` programs, ``BLOCK`` requests a tile
(``_PREPARE_INPUTS_BLOCK_SIZE`` of the proposer's module), each program walking the
tiles grid-stride. An NPU has tens of vector cores, so a batch of a few dozen
requests runs one lap per program, and a wrong loop bound or stride shows only in
batches past ``BLOCK * cores`` requests, which the gate never draws. Here the
vector-core count is set for each launch to half the batch's tiles (at least one):
with more than one tile every program runs two laps or more, and with more than
three, more than one program runs. The count is read by vllm-ascend's
``get_vectorcore_num()`` on every launch; no other value of the launch changes.
"""

from __future__ import annotations

import contextlib
import importlib

BLOCK_NAME = "_PREPARE_INPUTS_BLOCK_SIZE"


def tile_size(module) -> int:
    """Requests per program tile of the kernel launched by ``module``'s ``prepare_inputs_padded``."""
    block = getattr(module, BLOCK_NAME, None)
    if not isinstance(block, int) or block < 1:
        raise RuntimeError(f"{module.__name__}.{BLOCK_NAME}={block!r}: expected the kernel's tile size, an int >= 1")
    return block


def lapping_cores(num_reqs: int, block: int) -> int:
    """The vector-core count under which each program of a ``num_reqs`` launch runs two laps or more."""
    tiles = -(-num_reqs // block)
    return max(1, tiles // 2)


@contextlib.contextmanager
def lapping_grid(module, num_reqs: int):
    """vllm-ascend's vector-core count set to ``lapping_cores`` for the launches inside the block."""
    utils = importlib.import_module("vllm_ascend.ops.triton.triton_utils")  # imported with ``module``
    before = utils._NUM_VECTORCORE
    utils._NUM_VECTORCORE = lapping_cores(num_reqs, tile_size(module))
    try:
        yield
    finally:
        utils._NUM_VECTORCORE = before
