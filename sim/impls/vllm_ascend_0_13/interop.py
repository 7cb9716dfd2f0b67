"""The core's batches as vllm-ascend 0.13.0's ``AscendCommonAttentionMetadata`` (on vLLM 0.13's base class).

0.13's runner hands ``MtpProposer`` vLLM 0.13's ``CommonAttentionMetadata`` fields plus the
host mirrors NPU kernels read (``seq_lens_cpu``, ``num_computed_tokens_cpu``, ``positions``).
Three metadata are built here: the target's, for a verified batch (what the runner hands the
helpers); the first pass's, from the core's ``FirstPassInputs`` (what the helpers return,
for running ``_propose``'s first pass on its own); and a one-token-per-request decode batch
(for running the draft steps from given positions and lengths). Step 1's request states, the
discard indices and vLLM's ``SpecDecodeMetadata`` are the kit's (``sim.impls.kit.vllm_types``). Every tensor is fresh,
so in-place writes never reach the caller's batch.
"""

from __future__ import annotations

import numpy as np
import torch

from mtp.batch import FirstPassInputs, VerifiedBatch
from sim.impls.kit import vllm_types
from sim.impls.vllm_ascend_0_13.importing import import_ascend
from sim.oracle.cases import slot_of

discard_indices = vllm_types.discard_indices
to_spec_decode_metadata = vllm_types.to_spec_decode_metadata
to_step_one_inputs = vllm_types.to_step_one_inputs
first_pass_from_vllm = vllm_types.first_pass_from_vllm


def _metadata(qsl: torch.Tensor, seq_lens: torch.Tensor, query_lens, block_table, slots, positions, num_tokens: int):
    utils = import_ascend("vllm_ascend.attention.utils")
    qsl = qsl.to(torch.int32)
    seq_lens = seq_lens.to(torch.int32)
    seq_lens_cpu = seq_lens.cpu().clone()
    query_lens = torch.as_tensor(np.asarray(query_lens), dtype=torch.int32)
    return utils.AscendCommonAttentionMetadata(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=qsl.cpu().clone(),
        seq_lens=seq_lens.clone(),
        seq_lens_cpu=seq_lens_cpu,
        num_computed_tokens_cpu=seq_lens_cpu - query_lens,
        num_reqs=int(seq_lens.shape[0]),
        num_actual_tokens=num_tokens,
        num_input_tokens=num_tokens,
        max_query_len=int(query_lens.max()),
        max_seq_len=0,  # the runner's value: vllm-ascend gives its kernels seq_lens_cpu
        block_table_tensor=block_table.to(torch.int32).clone(),
        slot_mapping=slots.to(torch.int64).clone(),
        positions=positions.to(torch.int64).clone(),
    )


def to_ascend_metadata(batch: VerifiedBatch):
    """The target's ``AscendCommonAttentionMetadata`` of a verified batch, as the eager runner fills it."""
    return _metadata(
        batch.query_start_loc[: batch.num_reqs + 1],
        batch.seq_lens,
        batch.query_lens_cpu,
        batch.block_table,
        batch.slot_mapping[: batch.num_tokens],
        batch.positions[: batch.num_tokens],
        batch.num_tokens,
    )


def first_pass_metadata(batch: VerifiedBatch, first: FirstPassInputs):
    """The metadata the helpers hand ``_propose`` for ``first`` (its rows, lengths and slots)."""
    qsl = first.query_start_loc[: batch.num_reqs + 1]
    n = first.num_tokens
    return _metadata(
        qsl,
        first.seq_lens[: batch.num_reqs],
        np.diff(np.asarray(first.query_start_loc_cpu[: batch.num_reqs + 1])),
        batch.block_table,
        first.slot_mapping[:n],
        batch.positions[first.token_indices],
        n,
    )


def one_token_metadata(positions: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, block_size: int):
    """A decode batch of one token per request at ``positions`` (slots from the block table, as the
    runner computes them), attending to ``seq_lens``: the first pass the draft steps continue from."""
    b = positions.shape[0]
    table = block_table.tolist()
    slots = torch.tensor([slot_of(table[r], int(positions[r]), block_size) for r in range(b)], dtype=torch.int64)
    qsl = torch.arange(b + 1, dtype=torch.int32)
    return _metadata(qsl, seq_lens, [1] * b, block_table, slots, positions, b)


def with_prefill(batch: VerifiedBatch) -> bool:
    """The runner's ``with_prefill`` for this batch (``NPUModelRunner._build_attn_state``, 0.13.0, method
    mtp): False for ``DecodeOnly``/``SpecDecoding`` (some context computed, and every query one token, or
    one token plus its drafts), True otherwise (a prefill in the batch)."""
    q = np.asarray(batch.query_lens_cpu)
    computed = np.asarray(batch.seq_lens_cpu) - q
    if np.all(computed == 0):
        return True
    return not (np.all(q == 1) or np.all(q - np.asarray(batch.num_draft_tokens_cpu) == 1))
