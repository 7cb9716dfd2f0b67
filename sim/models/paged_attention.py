"""Paged KV cache and attention over it, in plain torch with static shapes.

Static shapes (the context window is ``max_blocks * block_size``) and no
data-dependent indexing mean no host sync, so the same code runs inside a
graph capture. Slot -1 writes to a trash row past the real slots.

A slot past the cache (a wrong slot mapping or block table) is never indexed: on an accelerator that
is a device-side assert, which ends every later kernel of the process, and a gate that runs many
cases in one process must name the case and go on. Such a slot reads and writes the trash row, the
largest one is recorded on the device, and ``check_bounds`` raises ``IndexError`` for it after the
call, on every device alike.
"""

from __future__ import annotations

import torch

from mtp.model import AttentionMeta


class PagedKvCache:
    """K and V for ``num_blocks * block_size`` slots, plus one trash slot."""

    def __init__(self, num_blocks: int, block_size: int, num_heads: int, head_dim: int, device, dtype=torch.float32):
        self.block_size = block_size
        self.num_slots = num_blocks * block_size
        shape = (self.num_slots + 1, num_heads, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.out_of_range = torch.full((), -1, device=device, dtype=torch.int64)  # the largest slot past the cache

    def rows(self, slots: torch.Tensor) -> torch.Tensor:
        """The cache rows of ``slots``: the trash row for a negative slot and for one past the cache
        (recorded for ``check_bounds``)."""
        slots = slots.to(torch.int64)
        past = slots >= self.num_slots
        if slots.numel():
            worst = torch.where(past, slots, -1).amax()
            torch.maximum(self.out_of_range, worst, out=self.out_of_range)
        return torch.where((slots < 0) | past, self.num_slots, slots)

    def check_bounds(self) -> None:
        """``IndexError`` naming the largest slot past the cache read or written since the last check."""
        worst = int(self.out_of_range)
        if worst >= 0:
            self.out_of_range.fill_(-1)
            raise IndexError(
                f"KV cache slot {worst} is past the cache's {self.num_slots} slots: a slot mapping or block table"
                " out of range (an accelerator stops at a device-side assert there)"
            )

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        rows = self.rows(slots)
        self.k.index_copy_(0, rows, k)
        self.v.index_copy_(0, rows, v)

    def clone(self) -> PagedKvCache:
        """Another cache of the same geometry holding what this one holds (a second layer's)."""
        other = object.__new__(PagedKvCache)
        other.block_size, other.num_slots = self.block_size, self.num_slots
        other.k, other.v = self.k.clone(), self.v.clone()
        other.out_of_range = self.out_of_range  # one record for the layers of one model
        return other

    def fill_(self, value: float) -> None:
        """Poison every slot (a test's way to make stale reads visible)."""
        self.k.fill_(value)
        self.v.fill_(value)


def row_requests(query_start_loc: torch.Tensor, num_rows: int) -> torch.Tensor:
    """The request each row belongs to, [N]."""
    rows = torch.arange(num_rows, device=query_start_loc.device, dtype=query_start_loc.dtype)
    return torch.searchsorted(query_start_loc[1:].contiguous(), rows, right=True)


def paged_attention(
    q: torch.Tensor, cache: PagedKvCache, attn: AttentionMeta, scale: float, recency: torch.Tensor
) -> torch.Tensor:
    """Causal attention of [N, heads, d] queries over each request's paged prefix.

    Row n of request r is query number ``n - qsl[r]`` of ``q_r`` rows, so it
    sits at context position ``seq_len[r] - q_r + (n - qsl[r])`` and attends
    to positions ``0..that``. This is how attention kernels read seq_lens:
    a seq_len too long makes a row see KV it must not see. With ``own_rows_only``
    a row sees only positions from ``seq_len[r] - q_r`` on: its request's rows of
    this forward, as a kernel handed no cached context reads them. ``recency`` [heads]
    is an ALiBi slope per head: recent positions weigh more, as in real models.
    """
    num_rows = q.shape[0]
    qsl = attn.query_start_loc.to(torch.int64)
    req = row_requests(qsl, num_rows)
    rows = torch.arange(num_rows, device=q.device)
    qlen = (qsl[1:] - qsl[:-1])[req]
    ctx_pos = attn.seq_lens.to(torch.int64)[req] - qlen + (rows - qsl[req])
    bs = cache.block_size
    window = attn.block_table.shape[1] * bs
    pos = torch.arange(window, device=q.device)
    blocks = attn.block_table.to(torch.int64)[req][:, pos // bs]  # [N, W]
    slots = cache.rows(torch.where(blocks >= 0, blocks * bs + pos % bs, -1))
    visible = (pos[None, :] <= ctx_pos[:, None]) & (blocks >= 0) & (pos[None, :] < attn.seq_len_bound)
    if attn.own_rows_only:
        visible &= pos[None, :] >= (ctx_pos - (rows - qsl[req]))[:, None]
    k = cache.k[slots]  # [N, W, heads, d]
    v = cache.v[slots].masked_fill(~visible[:, :, None, None], 0.0)  # unseen slots may hold poison
    scores = torch.einsum("nhd,nwhd->nhw", q, k) * scale
    scores = scores - recency[None, :, None] * (ctx_pos[:, None] - pos[None, :]).to(scores.dtype)[:, None, :]
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    sees_any = visible.any(dim=-1)[:, None, None]  # graph-padding rows see nothing: output zeros
    return torch.where(sees_any, torch.einsum("nhw,nwhd->nhd", probs, v), torch.zeros_like(q))
