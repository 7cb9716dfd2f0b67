"""Plain-Python description of one propose call, and its tensor form.

A ``BatchCase`` holds only lists and ints, so the from-scratch reference can
read it with loops and a failing case prints as something a person can paste.
``to_batch`` turns it into the typed tensors the core consumes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig


class RequestCase(NamedTuple):
    """One request in a verified batch.

    tokens:      ids at positions num_computed..seq_len: the scheduled tokens,
                 then the request's own token at seq_len (the backup).
    num_computed: tokens already in KV before this step.
    query_len:   tokens scheduled this step (positions num_computed..seq_len-1).
    num_drafts:  drafts verified this step (0 for a prefill).
    sampled:     the padded sampled row, K+1 ids, -1 (or >= vocab) placeholders.
    discarded:   True for a partial prefill whose sample is thrown away.
    blocks:      the request's block-table row.
    """

    tokens: list[int]
    num_computed: int
    query_len: int
    num_drafts: int
    sampled: list[int]
    discarded: bool
    blocks: list[int]

    @property
    def seq_len(self) -> int:
        return self.num_computed + self.query_len


class BatchCase(NamedTuple):
    """A whole propose call: the proposer's config, its requests, a data seed."""

    config: ProposerConfig
    requests: list[RequestCase]
    seed: int

    def replay_text(self) -> str:
        return f"BatchCase(config={self.config!r}, requests={list(self.requests)!r}, seed={self.seed})"


def valid_ids(req: RequestCase, vocab_size: int) -> list[int]:
    """The unpadded form of a request's sampled row."""
    if req.discarded:
        return []
    return [t for t in req.sampled if 0 <= t < vocab_size]


def slot_of(blocks: list[int], position: int, block_size: int) -> int:
    return blocks[position // block_size] * block_size + position % block_size


def to_batch(
    case: BatchCase, device: torch.device, padded: bool, hidden: torch.Tensor | None = None
) -> tuple[VerifiedBatch, SampledTokens]:
    """Tensors of ``case`` on ``device``; hidden states given, or drawn from ``case.seed``."""
    cfg, reqs = case.config, case.requests
    qlens = np.array([r.query_len for r in reqs], dtype=np.int64)
    qsl = np.concatenate([[0], np.cumsum(qlens)])
    seq_lens = np.array([r.seq_len for r in reqs], dtype=np.int64)
    drafts = np.array([r.num_drafts for r in reqs], dtype=np.int64)
    tokens = np.concatenate([r.tokens[:-1] for r in reqs])
    positions = np.concatenate([np.arange(r.num_computed, r.seq_len) for r in reqs])
    slots = np.array(
        [slot_of(r.blocks, p, cfg.block_size) for r in reqs for p in range(r.num_computed, r.seq_len)],
        dtype=np.int64,
    )
    width = max(len(r.blocks) for r in reqs)
    table = np.full((len(reqs), width), -1, dtype=np.int64)
    for i, r in enumerate(reqs):
        table[i, : len(r.blocks)] = r.blocks
    if hidden is None:
        hidden = torch.randn(len(tokens), cfg.hidden_size, generator=torch.Generator().manual_seed(case.seed))

    def dev(a, dtype):
        return torch.as_tensor(np.asarray(a), dtype=dtype).to(device)

    batch = VerifiedBatch(
        query_start_loc=dev(qsl, torch.int32),
        query_start_loc_cpu=qsl,
        seq_lens=dev(seq_lens, torch.int32),
        seq_lens_cpu=seq_lens,
        num_draft_tokens=dev(drafts, torch.int32),
        num_draft_tokens_cpu=drafts,
        token_ids=dev(tokens, torch.int32),
        positions=dev(positions, torch.int64),
        hidden_states=hidden.to(device),
        slot_mapping=dev(slots, torch.int64),
        block_table=dev(table, torch.int32),
        block_table_cpu=table,
    )
    sampled = SampledTokens(
        padded=dev([r.sampled for r in reqs], torch.int32) if padded else None,
        lists=None if padded else [valid_ids(r, cfg.vocab_size) for r in reqs],
        discarded=np.array([r.discarded for r in reqs], dtype=bool),
        backup=np.array([r.tokens[-1] for r in reqs], dtype=np.int64),
    )
    return batch, sampled
