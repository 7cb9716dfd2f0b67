"""Steps 1-3 by the helpers vLLM-derived proposers share, each generation's differing call handed in.

vLLM's ``EagleProposer``, vllm-ascend's ``AscendEagleProposer`` and 0.13.0's ``MtpProposer`` all
take step 1 from ``prepare_next_token_ids_padded`` (padded) or vLLM's ``prepare_next_token_ids_cpu``
(unpadded), and steps 2-3 from ``prepare_inputs_padded`` or ``prepare_inputs``. The unpadded calls
are alike in every generation; the padded ones take other arguments and return other tuples, so a
generation hands its own call in (``padded``). ``shifted_input_ids`` is the first-pass shift of
``set_inputs_first_pass`` (vLLM's and vllm-ascend's). ``triton_path`` chooses vllm-ascend's Triton kernel
(on the lapping grid of ``kernel_grid``) or its torch fallback for ``prepare_inputs_padded``.
"""

from __future__ import annotations

import contextlib

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, VerifiedBatch
from mtp.prepare import PADDING_SLOT, copied_rows
from sim.impls.kit import kernel_grid
from sim.impls.kit.vllm_types import StepOneInputs, to_spec_decode_metadata, to_step_one_inputs


def unpadded_lists(sampled: SampledTokens) -> list[list[int]]:
    """The runner's per-request sampled lists: a discarded request's is empty."""
    return [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]


def next_tokens(p, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int, padded) -> NextTokens:
    """Step 1 by the proposer ``p``: ``padded(step_one) -> (ids, counts)`` is the generation's
    ``prepare_next_token_ids_padded`` call; unpadded, vLLM's ``prepare_next_token_ids_cpu``."""
    step_one: StepOneInputs = to_step_one_inputs(batch, sampled, vocab_size)
    if sampled.is_padded:
        ids, counts = padded(step_one)
        return NextTokens(next_token_ids=ids.clone(), valid_counts=counts.to(torch.int32).clone())
    ids = p.prepare_next_token_ids_cpu(
        step_one.sampled_lists, step_one.requests, step_one.input_batch, step_one.num_scheduled
    )
    counts = torch.tensor([len(x) for x in step_one.sampled_lists], dtype=torch.int32)
    return NextTokens(next_token_ids=ids.to(batch.query_start_loc.device), valid_counts=counts)


def prepare_inputs(p, batch: VerifiedBatch, sampled: SampledTokens, cad, padded):
    """Steps 2-3 by the proposer ``p`` from the target's metadata ``cad``: (spec metadata, token indices,
    sample indices or None, rejected counts). ``padded(cad, spec_decode_metadata)`` is the generation's
    ``prepare_inputs_padded`` call, returning that tuple; unpadded, ``prepare_inputs``, which returns
    no count: the rejected counts are what it lowered ``seq_lens`` by."""
    if sampled.is_padded:
        return padded(cad, to_spec_decode_metadata(batch))
    spec_cad, rows = p.prepare_inputs(cad, unpadded_lists(sampled), [int(k) for k in batch.num_draft_tokens_cpu])
    rejected = (batch.seq_lens - spec_cad.seq_lens).to(torch.int32)
    return spec_cad, rows, None, rejected


def set_inputs_first_pass(p, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens, cad=None, rejected=None):
    """``p.set_inputs_first_pass`` on the rows of ``first`` (steps 1-2) as ``_propose`` hands them: the
    target's ids, positions and hidden states of those rows, the next tokens, the sample rows, the
    metadata ``cad`` and the rejected counts (what the shift alone reads neither)."""
    rows = first.token_indices
    return p.set_inputs_first_pass(
        target_token_ids=batch.token_ids[rows],
        next_token_ids=nxt.next_token_ids,
        target_positions=batch.positions[rows],
        target_hidden_states=batch.hidden_states[rows].to(p.hidden_states.dtype),
        token_indices_to_sample=first.sample_indices,
        cad=cad,
        num_rejected_tokens_gpu=rejected,
    )


def expand_by_next_token(p, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens, cad, slot_buffer_len: int):
    """``(first, input_ids, positions)`` of a draft model's first pass by the drafter ``p``'s own
    ``set_inputs_first_pass`` (vLLM's, or vllm-ascend's), from ``first`` (steps 1-2, padded or unpadded)
    and ``cad``, the generation's metadata of its rows, as ``propose`` hands them, each request's rejected
    rows counted (0 where they were dropped); in the core's types. The rows each first-pass row copies are
    the harness's bookkeeping (``mtp.prepare.copied_rows``): the drafter has no such rows."""
    rejected = (first.query_start_loc[1:] - 1 - first.sample_indices).to(torch.int32)  # kept past the last accepted
    total, sample, grown = set_inputs_first_pass(p, batch, first, nxt, cad, rejected)[:3]
    b = batch.num_reqs
    slots = torch.full((slot_buffer_len,), PADDING_SLOT, dtype=torch.int64)
    slots[:total] = grown.slot_mapping[:total]
    expanded = FirstPassInputs(
        token_indices=copied_rows(first, b),
        query_start_loc=grown.query_start_loc[: b + 1].clone(),
        query_start_loc_cpu=grown.query_start_loc_cpu[: b + 1].numpy().astype("int64"),
        seq_lens=grown.seq_lens[:b].to(torch.int32).clone(),
        # what its later steps start from: the generation's (``first``'s), grown as the lengths were
        accepted_seq_lens=(first.accepted_seq_lens + grown.seq_lens[:b] - first.seq_lens).to(torch.int32),
        slot_mapping=slots,
        sample_indices=sample.to(torch.int64).clone(),
        num_rejected=first.num_rejected,
        max_query_len=int(grown.max_query_len),
    )
    return expanded, p.input_ids[:total].clone(), p.positions[:total].to(torch.int64).clone()


def shifted_input_ids(p, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
    """The first pass's input ids by ``p.set_inputs_first_pass`` (vLLM's shift, which vllm-ascend inherits)
    on ``p``'s own buffer: rows it never writes keep their old values."""
    set_inputs_first_pass(p, batch, first, nxt)
    return p.input_ids[: first.num_tokens].clone()


@contextlib.contextmanager
def triton_path(module, on: bool, num_reqs: int):
    """Run ``prepare_inputs_padded`` of vllm-ascend's ``module`` (the one that reads ``HAS_TRITON``; it
    moved between releases) through its Triton kernel (True), on a grid where every program of a
    ``num_reqs`` launch laps (``kernel_grid``), or through its torch fallback."""
    before = module.HAS_TRITON
    module.HAS_TRITON = bool(on) and before
    try:
        with kernel_grid.lapping_grid(module, num_reqs) if module.HAS_TRITON else contextlib.nullcontext():
            yield
    finally:
        module.HAS_TRITON = before
