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
from sim.impls.kit import steps
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.vllm_interop import host_seq_lens


def expand_by_next_token(p, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens, slot_buffer_len: int):
    """``(first, input_ids, positions)`` of a draft model's first pass by the drafter ``p``'s own
    ``set_inputs_first_pass`` (``steps.expand_by_next_token``), on vllm-ascend's metadata of ``first``'s rows."""
    utils = import_ascend("vllm_ascend.attention.utils")
    b, n = batch.num_reqs, first.num_tokens
    qsl_cpu = torch.as_tensor(first.query_start_loc_cpu, dtype=torch.int32)
    seq_cpu = host_seq_lens(batch, first).to(torch.int32)
    cad = utils.AscendCommonAttentionMetadata(
        query_start_loc=first.query_start_loc.to(torch.int32).clone(),
        query_start_loc_cpu=qsl_cpu,
        seq_lens=first.seq_lens.to(torch.int32).clone(),
        seq_lens_cpu=seq_cpu,
        num_computed_tokens_cpu=seq_cpu - (qsl_cpu[1:] - qsl_cpu[:-1]),
        num_reqs=b,
        num_actual_tokens=n,
        max_query_len=first.max_query_len,
        max_seq_len=int(seq_cpu.max()),
        block_table_tensor=batch.block_table.to(torch.int32).clone(),
        slot_mapping=first.slot_mapping[:n].clone(),
        positions=batch.positions[first.token_indices].clone(),
    )
    return steps.expand_by_next_token(p, batch, first, nxt, cad, slot_buffer_len)
