"""A draft model's first pass by vllm-ascend: its ``set_inputs_first_pass`` with the rows it adds.

A drafter whose first pass adds rows (``needs_extra_input_slots``: method ``draft_model``) lays each
request's accepted tokens, its next token and its rejected rows out through
``torch.ops._C_ascend.npu_copy_and_expand_eagle_inputs`` (on the CPU: vLLM's Triton kernel,
``fake_torch_npu.copy_and_expand``), then recomputes the slots (vLLM's ``compute_new_slot_mapping``) and
grows every query and seq_len by one (``extend_all_queries_by_N``, and vllm-ascend's own host mirrors).
``expand_by_next_token`` runs it on one call's first pass as ``_propose`` hands it, and returns what
it built in the core's types, for the single-call properties.
"""

from __future__ import annotations

import torch

from mtp.batch import FirstPassInputs, NextTokens, VerifiedBatch
from mtp.prepare import PADDING_SLOT, copied_rows
from sim.impls.kit import steps
from sim.impls.kit.ascend.importing import import_ascend


def expand_by_next_token(p, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens, slot_buffer_len: int):
    """``(first, input_ids, positions)`` of a draft model's first pass by the drafter ``p``'s own
    ``set_inputs_first_pass``, from ``first`` (steps 1-2, padded or unpadded) as ``_propose`` hands it:
    the target's metadata of its rows, and each request's rejected count (0 where they were dropped)."""
    utils = import_ascend("vllm_ascend.attention.utils")
    b, n = batch.num_reqs, first.num_tokens
    qsl, seq = first.query_start_loc.to(torch.int32), first.seq_lens.to(torch.int32)
    cad = utils.AscendCommonAttentionMetadata(
        query_start_loc=qsl.clone(),
        query_start_loc_cpu=torch.as_tensor(first.query_start_loc_cpu, dtype=torch.int32),
        seq_lens=seq.clone(),
        seq_lens_cpu=seq.cpu().clone(),
        num_computed_tokens_cpu=(seq - (qsl[1:] - qsl[:-1])).cpu(),
        num_reqs=b,
        num_actual_tokens=n,
        max_query_len=first.max_query_len,
        max_seq_len=int(seq.max()),
        block_table_tensor=batch.block_table.to(torch.int32).clone(),
        slot_mapping=first.slot_mapping[:n].clone(),
        positions=batch.positions[first.token_indices].clone(),
    )
    rejected = (qsl[1:] - 1 - first.sample_indices).to(torch.int32)  # rows kept after the last accepted one
    total, sample, grown, _ = steps.set_inputs_first_pass(p, batch, first, nxt, cad, rejected)
    slots = torch.full((slot_buffer_len,), PADDING_SLOT, dtype=torch.int64)
    slots[:total] = grown.slot_mapping[:total]
    expanded = FirstPassInputs(
        token_indices=copied_rows(first, b),  # the harness's bookkeeping: vllm-ascend has no such rows
        query_start_loc=grown.query_start_loc[: b + 1].clone(),
        query_start_loc_cpu=grown.query_start_loc_cpu[: b + 1].numpy().astype("int64"),
        seq_lens=grown.seq_lens[:b].to(torch.int32).clone(),
        accepted_seq_lens=grown.seq_lens[:b].to(torch.int32).clone(),  # what its later steps start from
        slot_mapping=slots,
        sample_indices=sample.to(torch.int64).clone(),
        num_rejected=first.num_rejected,
        max_query_len=int(grown.max_query_len),
    )
    return expanded, p.input_ids[:total].clone(), p.positions[:total].to(torch.int64).clone()
