"""Malformed propose inputs: a valid batch with one field broken.

Each draw returns the broken inputs and the field name the error must carry.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from hypothesis import strategies as st

from mtp.batch import SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from sim.oracle.cases import to_batch
from tests.strategies.batches import batch_cases


class Malformed(NamedTuple):
    config: ProposerConfig
    batch: VerifiedBatch
    sampled: SampledTokens
    field: str  # what the ValueError must name
    mutation: str


def _qsl_not_monotonic(cfg, b, s, r):
    qsl = b.query_start_loc_cpu.copy()
    qsl[r + 1] = qsl[r]  # request r gets length 0, or r+1 goes backwards
    return cfg, dataclasses.replace(b, query_start_loc_cpu=qsl), s, "query_start_loc"


def _negative_seq_len(cfg, b, s, r):
    seq = b.seq_lens_cpu.copy()
    seq[r] = -seq[r]
    return cfg, dataclasses.replace(b, seq_lens_cpu=seq), s, "seq_lens"


def _id_out_of_vocab(cfg, b, s, r):
    lists = [list(x) for x in s.lists]
    lists[r] = (lists[r] or [0])[:-1] + [cfg.vocab_size + r]
    discarded = s.discarded.copy()
    discarded[r] = False
    return cfg, b, dataclasses.replace(s, lists=lists, discarded=discarded), "sampled_token_ids"


def _block_table_too_short(cfg, b, s, r):
    table = b.block_table_cpu[:, :0]
    return cfg, dataclasses.replace(b, block_table_cpu=table), s, "block_table"


def _block_unallocated(cfg, b, s, r):
    table = b.block_table_cpu.copy()
    table[r, 0] = -1
    return cfg, dataclasses.replace(b, block_table_cpu=table), s, "block_table"


def _too_many_tokens(cfg, b, s, r):
    return dataclasses.replace(cfg, max_num_tokens=b.num_tokens - 1), b, s, "num_tokens"


def _too_many_drafts(cfg, b, s, r):
    drafts = b.num_draft_tokens_cpu.copy()
    drafts[r] = cfg.num_spec_tokens + 1
    return cfg, dataclasses.replace(b, num_draft_tokens_cpu=drafts), s, "num_draft_tokens"


def _padded_k_mismatch(cfg, b, s, r):
    extra = torch.full((b.num_reqs, 1), -1, dtype=torch.int32)
    padded = torch.cat([torch.full((b.num_reqs, cfg.num_spec_tokens + 1), -1, dtype=torch.int32), extra], dim=1)
    return cfg, b, dataclasses.replace(s, padded=padded, lists=None), "sampled_token_ids.shape"


MUTATIONS = [
    _qsl_not_monotonic,
    _negative_seq_len,
    _id_out_of_vocab,
    _block_table_too_short,
    _block_unallocated,
    _too_many_tokens,
    _too_many_drafts,
    _padded_k_mismatch,
]


@st.composite
def malformed_inputs(draw):
    case = draw(batch_cases(max_reqs=8))
    batch, sampled = to_batch(case, torch.device("cpu"), padded=False)
    # A one-token batch fits any buffer: it cannot hold too many tokens.
    mutate = draw(st.sampled_from([m for m in MUTATIONS if m is not _too_many_tokens or batch.num_tokens > 1]))
    r = draw(st.integers(0, len(case.requests) - 1))
    cfg, batch, sampled, field = mutate(case.config, batch, sampled, r)
    return Malformed(cfg, batch, sampled, field, mutate.__name__.strip("_"))
