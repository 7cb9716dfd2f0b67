"""Attention that reads no cached context (``AttentionMeta.own_rows_only``, vllm-ascend's ``PrefillNoCache``).

A request with no tokens before its rows of the forward attends the same either way (bit for bit: a
correct label changes no draft); one with context loses it, so its rows, and only its, change.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mtp.model import AttentionMeta
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp

pytestmark = pytest.mark.order(-3)


def _forward(own_rows_only: bool) -> torch.Tensor:
    """Request 0: 3 cached tokens, then 2 rows; request 1: 2 rows, nothing before them."""
    cfg = TinyConfig(vocab_size=32, hidden_size=32)
    cache = PagedKvCache(4, 4, cfg.num_heads, cfg.head_dim, "cpu")
    generator = torch.Generator().manual_seed(1)
    cache.k.copy_(torch.randn(cache.k.shape, generator=generator))  # the context request 0 has
    cache.v.copy_(torch.randn(cache.v.shape, generator=generator))
    model = TinyMtp(cfg, cache)
    ids, positions = torch.tensor([3, 5, 7, 1]), torch.tensor([3, 4, 0, 1])
    hidden = torch.randn(4, 32, generator=torch.Generator().manual_seed(0))
    meta = AttentionMeta(
        query_start_loc=torch.tensor([0, 2, 4], dtype=torch.int32),
        seq_lens=torch.tensor([5, 2], dtype=torch.int32),
        block_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        slot_mapping=torch.tensor([3, 4, 8, 9]),
        seq_len_bound=torch.tensor([5]),
    )
    return model.forward(ids, positions, hidden, dataclasses.replace(meta, own_rows_only=own_rows_only))


def test_a_request_without_context_attends_the_same_and_one_with_context_loses_it():
    cached, own = _forward(False), _forward(True)
    assert torch.equal(cached[2:], own[2:])  # request 1: nothing before its rows
    assert not torch.allclose(cached[0], own[0]) and not torch.allclose(cached[1], own[1])  # request 0
