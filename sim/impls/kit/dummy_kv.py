"""A dummy run writes no KV: a rank with no requests keeping step with its peers runs the draft's forwards on a
dummy batch, whose slots are padding, and a slot it wrote would be a live request's KV.

Block 0 is vLLM's null block, nobody's (``NULL_BLOCK``): dummy tables are zeroed rows, and a capture's warm-up
may write there harmlessly.
"""

from __future__ import annotations

import contextlib

import torch

from sim.models.block_allocator import NULL_BLOCK


class DummyRunWroteKv(AssertionError):
    """A dummy batch's forwards wrote KV (``writes_no_kv``)."""


@contextlib.contextmanager
def writes_no_kv(model, tolerated=frozenset()):
    """The dummy runs inside the block write no KV in ``model``'s caches (its layers') outside the null
    block and the ``tolerated`` slots (a known defect's, exactly): a dummy batch's slots are -1 (as the
    runner's dummy run leaves them), and a capture's metadata is built from it, so a dummy forward that writes
    a slot writes over a live request's KV (v0.22.1rc's captures at start-up write slot 0 from a zero-filled
    slot buffer, the null block, harmlessly). Compared bit for bit (a poisoned cache holds NaNs); raises
    ``DummyRunWroteKv`` naming the first slots written; yields the list the tolerated slots written are put in."""
    caches = [model.tiny.cache, *(cache for _, cache in model.more_layers)]
    before = [(cache.k[: cache.num_slots].clone(), cache.v[: cache.num_slots].clone()) for cache in caches]
    written: list[int] = []
    yield written
    for cache, (k, v) in zip(caches, before):
        n = cache.num_slots
        changed = _bits(cache.k[:n]) != _bits(k)
        changed |= _bits(cache.v[:n]) != _bits(v)
        slots = changed.reshape(n, -1).any(dim=1).nonzero().flatten()
        slots = slots[slots // cache.block_size != NULL_BLOCK].tolist()
        untolerated = [s for s in slots if s not in tolerated]
        if untolerated:
            raise DummyRunWroteKv(
                f"a dummy run wrote KV at {len(untolerated)} slots, first {untolerated[:8]}: a dummy batch's "
                "slots are -1, its forwards write none (a written slot is a live request's KV)"
            )
        written.extend(slots)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)
