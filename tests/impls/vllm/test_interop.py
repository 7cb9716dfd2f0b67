"""sim.impls.kit.vllm_interop: vLLM's types carry exactly the core's metadata, in fresh tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from sim.impls.kit import vllm_interop as interop
from sim.oracle.cases import to_batch
from tests.impls.suites import CPU
from tests.strategies.batches import batch_cases


@given(case=batch_cases())
def test_a_verified_batch_as_vllms_metadata(case):
    batch, _ = to_batch(case, CPU, padded=True)
    cad, spec = interop.to_common_attn_metadata(batch), interop.to_spec_decode_metadata(batch)
    assert cad.query_start_loc.tolist() == batch.query_start_loc.tolist()
    assert cad.query_start_loc_cpu.tolist() == np.asarray(batch.query_start_loc_cpu).tolist()
    assert cad.seq_lens.tolist() == cad.seq_lens_cpu_upper_bound.tolist() == batch.seq_lens.tolist()
    assert cad.block_table_tensor.tolist() == batch.block_table.tolist()
    assert cad.slot_mapping.tolist() == batch.slot_mapping[: batch.num_tokens].tolist()
    assert (cad.num_reqs, cad.num_actual_tokens) == (batch.num_reqs, batch.num_tokens)
    assert cad.max_query_len == max(r.query_len for r in case.requests)
    assert cad.seq_lens is not batch.seq_lens  # vLLM lowers seq_lens in place: never the caller's tensor
    assert spec.num_draft_tokens == [r.num_drafts for r in case.requests]
    qsl = np.asarray(batch.query_start_loc_cpu)
    ids = batch.token_ids.tolist()
    want = [t for r, k in enumerate(spec.num_draft_tokens) for t in ids[qsl[r] + 1 : qsl[r] + 1 + k]]
    assert spec.draft_token_ids.tolist() == want


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_sampled_tokens_as_vllms_step_one_inputs(padded, case):
    batch, sampled = to_batch(case, CPU, padded)
    step_one = interop.to_step_one_inputs(batch, sampled, case.config.vocab_size)
    assert step_one.discard_mask.tolist() == np.asarray(sampled.discarded).tolist()
    for r, rid in enumerate(step_one.input_batch.req_ids):
        assert step_one.requests[rid].get_token_id(int(batch.seq_lens_cpu[r])) == int(sampled.backup[r])
        assert step_one.num_scheduled[rid] == case.requests[r].query_len
    if padded:
        assert step_one.sampled_lists is None
    else:  # a discarded request's list is emptied, as vLLM's runner does
        assert step_one.sampled_lists == [[] if d else ids for ids, d in zip(sampled.lists, sampled.discarded)]
    assert torch.equal(torch.as_tensor(step_one.input_batch.num_tokens_no_spec), batch.seq_lens.cpu().int() + 1)
