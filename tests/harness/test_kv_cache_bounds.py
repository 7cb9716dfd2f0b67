"""The tiny model's paged cache never indexes past itself (``sim.models.paged_attention``).

A slot mapping or block table out of range is raised as ``IndexError`` naming the slot after the call
(``check_bounds``, which every serving run calls after each propose), on the device the gate runs on:
on an accelerator indexing past the cache would be a device-side assert that ends every later test of
the process. A forward in range leaves nothing to raise, and the cache goes on after a raise.
"""

from __future__ import annotations

import pytest
import torch

from mtp.model import AttentionMeta
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp

pytestmark = pytest.mark.order(-3)

CFG = TinyConfig(vocab_size=32, hidden_size=32)
NUM_BLOCKS, BLOCK_SIZE = 4, 4  # slots 0..15


def _forward(device, slots: list[int], blocks: list[int]) -> tuple[TinyMtp, torch.Tensor]:
    """One request of two rows at positions 2, 3 (seq_len 4) through ``blocks``, writing ``slots``."""
    dev = device.torch_device
    cache = PagedKvCache(NUM_BLOCKS, BLOCK_SIZE, CFG.num_heads, CFG.head_dim, dev)
    model = TinyMtp(CFG, cache).to(dev)
    meta = AttentionMeta(
        query_start_loc=torch.tensor([0, 2], dtype=torch.int32, device=dev),
        seq_lens=torch.tensor([4], dtype=torch.int32, device=dev),
        block_table=torch.tensor([blocks], dtype=torch.int32, device=dev),
        slot_mapping=torch.tensor(slots, device=dev),
        seq_len_bound=torch.tensor([4], device=dev),
    )
    hidden = torch.randn(2, CFG.hidden_size, generator=torch.Generator().manual_seed(0)).to(dev)
    out = model.forward(torch.tensor([3, 5], device=dev), torch.tensor([2, 3], device=dev), hidden, meta)
    return model, out


def test_a_forward_in_range_leaves_nothing_to_raise(device):
    model, out = _forward(device, [2, 3], [0, -1])
    model.cache.check_bounds()
    assert torch.isfinite(out).all()


@pytest.mark.parametrize(
    "slots, blocks, worst",
    [([2, 16], [0, -1], 16), ([2, 3], [4, -1], 19), ([-1, 21], [0, 5], 23)],
    ids=["write-past", "read-past", "both"],
)
def test_a_slot_past_the_cache_is_raised_after_the_call_naming_it(device, slots, blocks, worst):
    model, _ = _forward(device, slots, blocks)
    with pytest.raises(IndexError, match=rf"KV cache slot {worst} is past the cache's 16 slots"):
        model.cache.check_bounds()
    model.cache.check_bounds()  # raised once; the cache goes on
    second, dev = model.cache.clone(), device.torch_device
    second.write(torch.tensor([17], device=dev), *[torch.zeros(1, CFG.num_heads, CFG.head_dim, device=dev)] * 2)
    with pytest.raises(IndexError, match="slot 17"):  # a layer's clone shares the record
        model.cache.check_bounds()


def test_the_block_allocator_never_hands_out_the_null_block():
    """Block 0 is nobody's KV, as in vLLM's ``BlockPool``: every other block is handed out, block 0 never,
    whatever the seed (a dummy run's write there, from a zero-filled slot buffer, harms no request)."""
    from sim.models.block_allocator import NULL_BLOCK, BlockAllocator, OutOfBlocks

    for seed in range(5):
        allocator = BlockAllocator(9, seed)
        assert sorted(allocator.allocate(8)) == list(range(1, 9))
        with pytest.raises(OutOfBlocks):
            allocator.allocate(1)
        assert NULL_BLOCK not in BlockAllocator(9, seed).allocate(8)
