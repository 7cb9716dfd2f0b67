"""Deliberately broken variants of the core, each a known upstream bug.

The property suite must fail on every one of them (tests/meta/test_broken_caught.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mtp.batch import StepMeta
from mtp.ops import CoreOps
from mtp.prepare import PADDING_SLOT


class SlotPlusOne(CoreOps):
    """The 0.13-era proposer's ``slot_mapping += 1``: wrong once a draft crosses a block boundary."""

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step):
        meta = super().advance_step(cfg, base_positions, accepted_seq_lens, block_table, step)
        base = super().advance_step(cfg, base_positions, accepted_seq_lens, block_table, 1)
        slots = torch.where(meta.slot_mapping == PADDING_SLOT, meta.slot_mapping, base.slot_mapping + (step - 1))
        return StepMeta(meta.positions, meta.seq_lens, slots)


class PaddedSeqLensNotLowered(CoreOps):
    """The 0.13-era proposer's padded mode: later steps attend to the KV of rejected tokens."""

    def prepare(self, cfg, batch, sampled, nxt):
        first = super().prepare(cfg, batch, sampled, nxt)
        if sampled.is_padded:
            first.accepted_seq_lens = first.seq_lens
        return first


class SampleIndexOffByOne(CoreOps):
    """Sample index one row too far: ``query_start_loc[r+1] - n_rej``."""

    def prepare(self, cfg, batch, sampled, nxt):
        first = super().prepare(cfg, batch, sampled, nxt)
        first.sample_indices = torch.clamp(first.sample_indices + 1, max=first.num_tokens - 1)
        return first


class MaxQueryLenFromOldLengths(CoreOps):
    """The 0.13-era proposer's unpadded path: max_query_len taken from the query lengths before rejection."""

    def prepare(self, cfg, batch, sampled, nxt):
        first = super().prepare(cfg, batch, sampled, nxt)
        first.max_query_len = int(batch.query_lens_cpu.max())
        return first


class NoValidation(CoreOps):
    """Trusts its inputs: a malformed call crashes deep inside, or silently drafts garbage."""

    def validate(self, cfg, batch, sampled):
        pass


class PaddedPathSyncs(CoreOps):
    """Reads the valid counts back to the host to compute sample indices."""

    def next_tokens(self, cfg, sampled, device):
        nxt = super().next_tokens(cfg, sampled, device)
        nxt.valid_counts.tolist()
        return nxt


class DiscardedListsCounted(CoreOps):
    """Unpadded mode: a discarded request's list is counted as if its sample were kept
    (vLLM may hand a partial prefill's thrown-away token in its list)."""

    @staticmethod
    def _kept(sampled):
        return dataclasses.replace(sampled, discarded=np.zeros_like(sampled.discarded))

    def next_tokens(self, cfg, sampled, device):
        return super().next_tokens(cfg, sampled if sampled.is_padded else self._kept(sampled), device)

    def prepare(self, cfg, batch, sampled, nxt):
        return super().prepare(cfg, batch, sampled if sampled.is_padded else self._kept(sampled), nxt)


class UnpaddedIdsAsFloat(CoreOps):
    """Unpadded mode: next token ids and counts handed on as float64 (a dropped
    ``astype``); equal by value, wrong for embedding lookups and int kernels."""

    def next_tokens(self, cfg, sampled, device):
        nxt = super().next_tokens(cfg, sampled, device)
        if not sampled.is_padded:
            nxt.next_token_ids, nxt.valid_counts = nxt.next_token_ids.double(), nxt.valid_counts.double()
        return nxt


# A draft model's first pass (mtp.prepare.expand_by_next_token), broken as a port from MTP's would be.
class DraftModelIdsShifted(CoreOps):
    """The first pass's ids shifted left by one as MTP's are: each row feeds the token after its own."""

    def expand_by_next_token(self, cfg, batch, first, nxt):
        expanded, ids, positions = super().expand_by_next_token(cfg, batch, first, nxt)
        shifted = torch.cat([ids[1:], ids[-1:]])
        shifted[expanded.sample_indices] = ids[expanded.sample_indices]
        return expanded, shifted, positions


class DraftModelNextTokenAtItsPredecessorsPosition(CoreOps):
    """The next token's row rotated at the last accepted token's position (MTP's sample position)."""

    def expand_by_next_token(self, cfg, batch, first, nxt):
        expanded, ids, positions = super().expand_by_next_token(cfg, batch, first, nxt)
        positions = positions.clone()
        positions[expanded.sample_indices] -= 1
        return expanded, ids, positions


class DraftModelRejectedRowsWriteKv(CoreOps):
    """Padded: the rejected rows moved after the next token keep their target slots (the mask missed),
    so they overwrite the KV the next token's row and the steps wrote or will read."""

    def expand_by_next_token(self, cfg, batch, first, nxt):
        expanded, ids, positions = super().expand_by_next_token(cfg, batch, first, nxt)
        inert = expanded.slot_mapping[: ids.shape[0]] == PADDING_SLOT
        rows = expanded.token_indices
        expanded.slot_mapping[: ids.shape[0]] = torch.where(
            inert, batch.slot_mapping[rows], expanded.slot_mapping[: ids.shape[0]]
        )
        return expanded, ids, positions


class DraftModelSeqLensNotGrown(CoreOps):
    """The queries grow by the next token's row, the seq_lens do not: the last key of each request is lost."""

    def expand_by_next_token(self, cfg, batch, first, nxt):
        expanded, ids, positions = super().expand_by_next_token(cfg, batch, first, nxt)
        return dataclasses.replace(expanded, seq_lens=first.seq_lens), ids, positions


class DraftModelStepsFromTheLastAccepted(CoreOps):
    """The steps go on from the last accepted token's position and length (MTP's), not the next token's."""

    def prepare_call(self, cfg, batch, sampled):
        prepared = super().prepare_call(cfg, batch, sampled)
        if cfg.method != "draft_model":
            return prepared
        first = dataclasses.replace(prepared.first, accepted_seq_lens=prepared.first.accepted_seq_lens - 1)
        return dataclasses.replace(prepared, first=first, base_positions=prepared.base_positions - 1)


class DraftModelRowsCountedOnTheHost(CoreOps):
    """The draft model's grown row count read back to the host (as a ``repeat_interleave`` without its
    output size reads its total): a host sync in the padded path."""

    def expand_by_next_token(self, cfg, batch, first, nxt):
        expanded, ids, positions = super().expand_by_next_token(cfg, batch, first, nxt)
        int(expanded.query_start_loc[-1])
        return expanded, ids, positions
