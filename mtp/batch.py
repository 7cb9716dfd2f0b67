"""Typed metadata of one propose call.

Device tensors are ``torch.Tensor``; host copies are ``numpy`` arrays. Keeping
the two apart makes every device-to-host transfer explicit: the padded path
never touches a device tensor from the host, and a host array never pretends to
live on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class VerifiedBatch:
    """What the target model's verification step hands the proposer.

    B requests, T flattened tokens, H hidden size, K = ``num_spec_tokens``.

    query_start_loc:      int32 [B+1] device, cumulative query lengths.
    query_start_loc_cpu:  int64 [B+1] host copy of ``query_start_loc``.
    seq_lens:             int32 [B] device, tokens in KV after this step.
    seq_lens_cpu:         int64 [B] host copy of ``seq_lens``.
    num_draft_tokens:     int32 [B] device, drafts verified per request (0 for prefill).
    num_draft_tokens_cpu: int64 [B] host copy of ``num_draft_tokens``.
    token_ids:            int32 [T] device, the target's input ids.
    positions:            int64 [T] device.
    hidden_states:        float [T, H] device, the target's last hidden states.
    slot_mapping:         int64 [T] device, KV slot of each token.
    block_table:          int32 [B, max_blocks] device, -1 where unallocated.
    block_table_cpu:      int64 [B, max_blocks] host copy of ``block_table``.
    """

    query_start_loc: torch.Tensor
    query_start_loc_cpu: np.ndarray
    seq_lens: torch.Tensor
    seq_lens_cpu: np.ndarray
    num_draft_tokens: torch.Tensor
    num_draft_tokens_cpu: np.ndarray
    token_ids: torch.Tensor
    positions: torch.Tensor
    hidden_states: torch.Tensor
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    block_table_cpu: np.ndarray

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc_cpu[-1])

    @property
    def query_lens_cpu(self) -> np.ndarray:
        return np.diff(self.query_start_loc_cpu)


@dataclass
class SampledTokens:
    """The target's sampled tokens in one of the two forms the runner uses.

    padded:    int32 [B, K+1] device, -1 placeholders (padded mode), or None.
    lists:     per-request lists of valid sampled ids (unpadded mode), or None.
    discarded: bool [B] host; True where the sampled token is thrown away
               (a partial prefill). Its device copy is ``discarded_mask``.
    backup:    int64 [B] host; each request's own token at ``seq_len``, used
               when a request has no valid sampled token.
    """

    padded: torch.Tensor | None
    lists: list[list[int]] | None
    discarded: np.ndarray
    backup: np.ndarray

    @property
    def is_padded(self) -> bool:
        return self.padded is not None


@dataclass
class NextTokens:
    """Step 1 result: the token each request continues from.

    next_token_ids: int32 [B] device.
    valid_counts:   int32 [B] device, valid sampled tokens per request.
    """

    next_token_ids: torch.Tensor
    valid_counts: torch.Tensor


@dataclass
class FirstPassInputs:
    """Step 2 result: what the first MTP pass runs on.

    token_indices:   int64 [N] device, rows of the verified batch fed to the
                     first pass (identity in padded mode).
    query_start_loc: int32 [B+1] device, over the N rows.
    query_start_loc_cpu: int64 [B+1] host copy (padded mode keeps the batch's).
    seq_lens:        int32 [B] device, KV length seen by the first pass.
    accepted_seq_lens: int32 [B] device, ``seq_len - n_rejected``: the accepted
                     prefix, the base of every later step's seq_len.
    slot_mapping:    int64 [N_buf] device, KV slot of each row, -1 past N.
    sample_indices:  int64 [B] device, the row of each request's last accepted
                     token, whose MTP output gives draft 1.
    num_rejected:    int32 [B] device.
    max_query_len:   int, from the new query lengths (upper bound in padded mode).
    """

    token_indices: torch.Tensor
    query_start_loc: torch.Tensor
    query_start_loc_cpu: np.ndarray
    seq_lens: torch.Tensor
    accepted_seq_lens: torch.Tensor
    slot_mapping: torch.Tensor
    sample_indices: torch.Tensor
    num_rejected: torch.Tensor
    max_query_len: int

    @property
    def num_tokens(self) -> int:
        return self.token_indices.shape[0]


@dataclass
class StepMeta:
    """Per-request metadata of draft step j >= 2 (one token per request).

    positions: int64 [B] device, already sent to 0 where the position overflows.
    seq_lens:  int32 [B] device, 1 where the position overflows.
    slot_mapping: int64 [B] device, -1 where the position overflows.
    """

    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mapping: torch.Tensor
