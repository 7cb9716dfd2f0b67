"""Typed metadata of one propose call.

Device tensors are ``torch.Tensor``; host copies are ``numpy`` arrays. Keeping
the two apart makes every device-to-host transfer explicit: the padded path
never touches a device tensor from the host, and a host array never pretends to
live on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

NO_BACKUP = -1  # SampledTokens.backup of a request that cannot need one (see SampledTokens)


def _device_ints(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values), dtype=dtype).to(device)


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
    mrope_positions:      int64 [3, T] device, M-RoPE rows of each token
                          (``ProposerConfig.uses_mrope``), else None.
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
    mrope_positions: torch.Tensor | None = None

    @classmethod
    def from_requests(
        cls,
        *,
        query_lens: Sequence[int],
        seq_lens: Sequence[int],
        num_draft_tokens: Sequence[int],
        block_tables: Sequence[Sequence[int]],
        token_ids: Sequence[int] | torch.Tensor,
        positions: Sequence[int] | torch.Tensor,
        slot_mapping: Sequence[int] | torch.Tensor,
        hidden_states: torch.Tensor,
        device: torch.device | str | None = None,
        mrope_positions: Sequence[Sequence[int]] | torch.Tensor | None = None,
    ) -> VerifiedBatch:
        """A batch from per-request plain lists and the flattened token rows, on ``device``.

        Each host copy is made once from the lists, each device tensor once
        from its host copy, with the dtypes above. Block-table rows may differ
        in length; shorter rows are padded with -1 (unallocated). ``device``
        defaults to that of ``hidden_states``. Nothing is checked here: the
        proposer validates every call.
        """
        device = torch.device(device) if device is not None else hidden_states.device
        qsl = np.concatenate([[0], np.cumsum(np.asarray(query_lens, dtype=np.int64))]).astype(np.int64)
        seq_lens_cpu = np.asarray(seq_lens, dtype=np.int64)
        drafts = np.asarray(num_draft_tokens, dtype=np.int64)
        width = max((len(row) for row in block_tables), default=0)
        table = np.full((len(block_tables), width), -1, dtype=np.int64)
        for r, row in enumerate(block_tables):
            table[r, : len(row)] = row
        return cls(
            query_start_loc=_device_ints(qsl, torch.int32, device),
            query_start_loc_cpu=qsl,
            seq_lens=_device_ints(seq_lens_cpu, torch.int32, device),
            seq_lens_cpu=seq_lens_cpu,
            num_draft_tokens=_device_ints(drafts, torch.int32, device),
            num_draft_tokens_cpu=drafts,
            token_ids=torch.as_tensor(token_ids, dtype=torch.int32).to(device),
            positions=torch.as_tensor(positions, dtype=torch.int64).to(device),
            hidden_states=hidden_states.to(device),
            slot_mapping=torch.as_tensor(slot_mapping, dtype=torch.int64).to(device),
            block_table=_device_ints(table, torch.int32, device),
            block_table_cpu=table,
            mrope_positions=None
            if mrope_positions is None
            else torch.as_tensor(mrope_positions, dtype=torch.int64).to(device),
        )

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
               (a partial prefill).
    backup:    int64 [B] host; each request's own token at ``seq_len``, used
               when a request has no valid sampled token. ``NO_BACKUP`` (-1)
               says "none": accepted only where the backup cannot be used (the
               unpadded form, a request not discarded with a non-empty list:
               what vLLM hands when the token at ``seq_len`` is not known yet).
               In the padded form any row may hold only placeholders, so every
               request needs a real backup.
    """

    padded: torch.Tensor | None
    lists: list[list[int]] | None
    discarded: np.ndarray
    backup: np.ndarray

    @classmethod
    def from_requests(
        cls,
        sampled: Sequence[Sequence[int]],
        *,
        padded: bool,
        backup: Sequence[int],
        discarded: Sequence[bool] | None = None,
        device: torch.device | str = "cpu",
    ) -> SampledTokens:
        """The sampled tokens of B requests from per-request lists.

        ``padded=True``: ``sampled`` holds the K+1-wide rows with -1
        placeholders, as the rejection sampler writes them; they become one
        int32 device tensor. ``padded=False``: ``sampled`` holds each request's
        valid ids (``[]`` for a discarded one), kept as host lists.
        ``discarded`` defaults to no request discarded.
        """
        num_reqs = len(sampled)
        discarded = np.zeros(num_reqs, dtype=bool) if discarded is None else np.asarray(discarded, dtype=bool)
        rows = [list(map(int, row)) for row in sampled]
        return cls(
            padded=_device_ints(rows, torch.int32, torch.device(device)) if padded else None,
            lists=None if padded else rows,
            discarded=discarded,
            backup=np.asarray(backup, dtype=np.int64),
        )

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
                     token, whose MTP output gives draft 1. A row of the first
                     pass: unpadded, a row of the compacted N rows (the batch
                     row is ``token_indices[sample_indices]``, see
                     ``sample_batch_rows``); padded, N = T and the two agree.
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

    @property
    def sample_batch_rows(self) -> torch.Tensor:
        """int64 [B] device: each sample row as a row of the verified batch, in either mode."""
        return self.token_indices[self.sample_indices]


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
