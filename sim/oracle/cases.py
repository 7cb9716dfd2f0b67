"""Plain-Python description of one propose call, and its tensor form.

A ``BatchCase`` holds only lists and ints, so the from-scratch reference can
read it with loops and a failing case prints as something a person can paste.
``to_batch`` turns it into the typed tensors the core consumes.
"""

from __future__ import annotations

from typing import NamedTuple

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
    mrope:       M-RoPE rows (temporal, height, width) of the query rows,
                 3 lists of ``query_len`` ints, under ``config.uses_mrope``.
    """

    tokens: list[int]
    num_computed: int
    query_len: int
    num_drafts: int
    sampled: list[int]
    discarded: bool
    blocks: list[int]
    mrope: list[list[int]] | None = None

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
    tokens = [t for r in reqs for t in r.tokens[:-1]]
    if hidden is None:
        hidden = torch.randn(len(tokens), cfg.target_hidden_size, generator=torch.Generator().manual_seed(case.seed))
    batch = VerifiedBatch.from_requests(
        query_lens=[r.query_len for r in reqs],
        seq_lens=[r.seq_len for r in reqs],
        num_draft_tokens=[r.num_drafts for r in reqs],
        block_tables=[r.blocks for r in reqs],
        token_ids=tokens,
        positions=[p for r in reqs for p in range(r.num_computed, r.seq_len)],
        slot_mapping=[slot_of(r.blocks, p, cfg.block_size) for r in reqs for p in range(r.num_computed, r.seq_len)],
        hidden_states=hidden,
        device=device,
        mrope_positions=[[p for r in reqs for p in r.mrope[i]] for i in range(3)] if cfg.uses_mrope else None,
    )
    sampled = SampledTokens.from_requests(
        [r.sampled if padded else valid_ids(r, cfg.vocab_size) for r in reqs],
        padded=padded,
        backup=[r.tokens[-1] for r in reqs],
        discarded=[r.discarded for r in reqs],
        device=device,
    )
    return batch, sampled
