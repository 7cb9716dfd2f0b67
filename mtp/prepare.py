"""Steps 2-3: what the first MTP pass runs on.

Rejected count per request: ``k_r + 1 - valid_r`` if ``k_r > 0`` else 0.
Unpadded mode drops the rejected tokens (on the host, where the sample counts
already are); padded mode keeps them as inert padding and only moves each
request's sample index back, computed on the device with no host sync.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from mtp.batch import FirstPassInputs, VerifiedBatch

PADDING_SLOT = -1


def num_rejected(num_draft_tokens, valid_counts):
    """``k + 1 - valid`` where drafts were verified, else 0 (numpy or torch)."""
    if isinstance(num_draft_tokens, torch.Tensor):
        rej = num_draft_tokens + 1 - valid_counts
        return torch.where(num_draft_tokens > 0, rej, torch.zeros_like(rej)).to(torch.int32)
    return np.where(num_draft_tokens > 0, num_draft_tokens + 1 - valid_counts, 0)


def _padded_slots(slots: torch.Tensor, buffer_len: int) -> torch.Tensor:
    out = torch.full((buffer_len,), PADDING_SLOT, dtype=torch.int64, device=slots.device)
    out[: slots.shape[0]] = slots
    return out


def prepare_unpadded(batch: VerifiedBatch, valid_counts_cpu: np.ndarray, slot_buffer_len: int) -> FirstPassInputs:
    """Compact the batch to its accepted tokens.

    New query lengths ``q - n_rej``; seq_lens ``seq_len - n_rej``; gather
    indices of the kept rows; slot mapping gathered the same way with a -1
    tail up to ``slot_buffer_len``.
    """
    device = batch.query_start_loc.device  # pragma: no mutate (None is the host, the simulator's device)
    rej = num_rejected(batch.num_draft_tokens_cpu, valid_counts_cpu)
    old_qsl = batch.query_start_loc_cpu
    new_qlens = np.diff(old_qsl) - rej
    new_qsl = np.concatenate([[0], np.cumsum(new_qlens)]).astype(np.int64)
    # Row i of request r keeps old row old_qsl[r] + (i - new_qsl[r]).
    starts = np.repeat(old_qsl[:-1] - new_qsl[:-1], new_qlens)
    indices = np.arange(new_qsl[-1]) + starts
    token_indices = torch.from_numpy(indices).to(device)
    seq_lens = torch.from_numpy((batch.seq_lens_cpu - rej).astype(np.int32)).to(device)
    return FirstPassInputs(
        token_indices=token_indices,
        query_start_loc=torch.from_numpy(new_qsl.astype(np.int32)).to(device),
        query_start_loc_cpu=new_qsl,
        seq_lens=seq_lens,
        accepted_seq_lens=seq_lens,
        slot_mapping=_padded_slots(batch.slot_mapping[token_indices], slot_buffer_len),
        sample_indices=torch.from_numpy(new_qsl[1:] - 1).to(device),
        num_rejected=torch.from_numpy(rej.astype(np.int32)).to(device),
        max_query_len=int(new_qlens.max()),
    )


def prepare_padded(batch: VerifiedBatch, valid_counts: torch.Tensor, slot_buffer_len: int) -> FirstPassInputs:
    """Keep every row; sample at ``query_start_loc[r+1] - 1 - n_rej``. No host sync."""
    device = batch.query_start_loc.device  # pragma: no mutate (None is the host, the simulator's device)
    rej = num_rejected(batch.num_draft_tokens, valid_counts)
    num_tokens = batch.num_tokens
    return FirstPassInputs(
        token_indices=torch.arange(num_tokens, device=device),
        query_start_loc=batch.query_start_loc,
        query_start_loc_cpu=batch.query_start_loc_cpu,
        seq_lens=batch.seq_lens,
        accepted_seq_lens=batch.seq_lens - rej,
        slot_mapping=_padded_slots(batch.slot_mapping[:num_tokens], slot_buffer_len),
        sample_indices=(batch.query_start_loc[1:] - 1 - rej).to(torch.int64),
        num_rejected=rej,
        max_query_len=int(batch.query_lens_cpu.max()),
    )


def first_pass_input_ids(
    token_ids: torch.Tensor, sample_indices: torch.Tensor, next_token_ids: torch.Tensor
) -> torch.Tensor:
    """Shift the flattened ids left by one, then write each next token at its sample index.

    Row i feeds the token that follows row i's token (MTP semantics: position i
    takes ``embed(t[i+1])``). The last row keeps its own id before the write.
    """
    ids = torch.cat([token_ids[1:], token_ids[-1:]])
    ids[sample_indices] = next_token_ids.to(ids.dtype)
    return ids


class _Layout(NamedTuple):
    """A draft model's first-pass rows: per row its request (``owner``), its index in the request, whether
    it is a kept row or the next token's, and the row of ``first`` it copies (the next token's and the
    rejected rows: their request's last accepted row); and the grown ``query_start_loc``."""

    owner: torch.Tensor
    index: torch.Tensor
    kept: torch.Tensor
    next_token: torch.Tensor
    source: torch.Tensor
    grown: torch.Tensor


def _next_token_layout(first: FirstPassInputs, num_reqs: int) -> _Layout:
    """``_Layout`` of the draft-model first pass that grows ``first``. No host sync."""
    device = first.query_start_loc.device  # pragma: no mutate (None is the host, the simulator's device)
    b, n = num_reqs, first.num_tokens
    qsl = first.query_start_loc.to(torch.int64)
    grown = qsl + torch.arange(b + 1, device=device)
    kept_count = first.sample_indices - qsl[:-1] + 1  # rows up to the last accepted, per request
    owner = torch.repeat_interleave(torch.arange(b, device=device), qsl[1:] - qsl[:-1] + 1, output_size=n + b)
    j = torch.arange(n + b, device=device) - grown[owner]  # a row's index within its request
    kept, nxt = j < kept_count[owner], j == kept_count[owner]
    source = torch.where(kept, qsl[owner] + j, first.sample_indices[owner])
    return _Layout(owner, j, kept, nxt, source, grown)


def copied_rows(first: FirstPassInputs, num_reqs: int) -> torch.Tensor:
    """The verified batch's row each row of a draft model's first pass copies (``expand_by_next_token``'s
    ``token_indices``), for an implementation that expands the first pass its own way."""
    return first.token_indices[_next_token_layout(first, num_reqs).source]


def expand_by_next_token(
    batch: VerifiedBatch,
    first: FirstPassInputs,
    next_token_ids: torch.Tensor,
    block_size: int,
    max_model_len: int,
    slot_buffer_len: int,
) -> tuple[FirstPassInputs, torch.Tensor, torch.Tensor]:
    """draft_model's first pass from ``first`` (padded or unpadded): ``(first, input_ids, positions)``.

    A draft model is a language model of its own, so its rows are the target's tokens at their own
    positions, not shifted. Each request gets one more row, right after its last accepted token: the
    next token, at the next position, where draft 1 is sampled. A rejected row (padded mode) moves
    after it and is inert (id 0, position 0, slot -1); a row at or past ``max_model_len`` writes no KV.
    Queries and seq_lens grow by one per request. Computed on the device: no host sync.
    ``token_indices`` names, per row, the batch row it copies (``copied_rows``).
    """
    b = batch.num_reqs
    owner, j, kept, nxt, source, grown = _next_token_layout(first, b)
    rows = first.token_indices[source]
    start = batch.positions[first.token_indices[first.query_start_loc[:-1].to(torch.int64)]]
    positions = torch.where(kept | nxt, start[owner] + j, 0)
    ids = torch.where(kept, batch.token_ids[rows].to(torch.int64), next_token_ids.to(torch.int64)[owner])
    ids = torch.where(kept | nxt, ids, 0).to(torch.int32)
    writes = (kept | nxt) & (positions < max_model_len)
    column = torch.where(writes, positions, 0) // block_size
    table_slots = batch.block_table[owner, column].to(torch.int64) * block_size + positions % block_size
    slots = torch.where(kept, batch.slot_mapping[rows], table_slots)
    slots = torch.where(writes, slots, PADDING_SLOT)
    expanded = FirstPassInputs(
        token_indices=rows,
        query_start_loc=grown.to(torch.int32),
        query_start_loc_cpu=first.query_start_loc_cpu + np.arange(b + 1),
        seq_lens=first.seq_lens + 1,
        accepted_seq_lens=first.accepted_seq_lens + 1,
        slot_mapping=_padded_slots(slots, slot_buffer_len),
        sample_indices=first.sample_indices + torch.arange(1, b + 1, device=grown.device),  # r rows added before
        num_rejected=first.num_rejected,
        max_query_len=first.max_query_len + 1,
    )
    return expanded, ids, positions
