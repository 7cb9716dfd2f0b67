"""Steps 1-3: 0.13.0's prepare_next_token_ids_padded / _cpu, prepare_inputs_padded (Triton kernel in the
interpreter, and its torch fallback) / prepare_inputs, and _propose's input shift, against the core."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from sim.impls.vllm_ascend_0_13 import interop
from sim.impls.vllm_ascend_0_13.build import configured
from sim.oracle.cases import to_batch
from tests.impls import suites
from tests.impls.suites import CPU
from tests.impls.vllm_ascend_0_13.cases import ASCEND, ASCEND_TRITON, both
from tests.strategies.batches import batch_cases

FIELDS = ("token_indices", "query_start_loc", "seq_lens", "slot_mapping", "sample_indices", "num_rejected")


@pytest.mark.parametrize("ops", [ASCEND, ASCEND_TRITON], ids=["torch", "triton"])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases(max_reqs=16))
def test_prepare_matches_core(padded, ops, case):
    """Next tokens and every first-pass field but the documented ones are the core's, on both paths."""
    _, _, core, got = both(case, padded, ops)
    assert got.next.next_token_ids.tolist() == core.next.next_token_ids.tolist()
    assert got.next.valid_counts.tolist() == core.next.valid_counts.tolist()
    suites.assert_first_pass_matches_core(core, got, FIELDS)


@given(case=batch_cases())
def test_backup_is_the_token_at_seq_len(case):
    """0.13 has no backup-token divergence (0.23 has): its padded step 1 asks for the token at seq_len
    (``seq_lens_cpu[i]``), the core's backup, even when the request knows more tokens."""
    cfg = case.config
    batch, sampled = to_batch(case, CPU, padded=True)
    known = batch.seq_lens_cpu + 3
    step_one = interop.to_step_one_inputs(batch, sampled, cfg.vocab_size, num_tokens_no_spec=known)
    p = configured(cfg.num_spec_tokens, cfg.max_model_len, cfg.hidden_size)
    idx, n = interop.discard_indices(sampled, CPU)
    p.prepare_next_token_ids_padded(
        interop.to_ascend_metadata(batch), sampled.padded, step_one.requests, step_one.input_batch, idx, n
    )
    for r, rid in enumerate(step_one.input_batch.req_ids):
        assert step_one.requests[rid].asked == [int(batch.seq_lens_cpu[r])]


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_stale_last_row_divergence(padded, case):
    """stale-last-row: ids are the core's on every row but the batch's last when it is a rejected token."""
    suites.assert_stale_last_row(ASCEND, case, padded, lambda hidden: configured(1, 4096, hidden).input_ids)


@given(case=batch_cases())
def test_caller_slot_mapping_rewritten(case):
    """slot-mapping-in-place: prepare_inputs compacts the caller's slot_mapping tensor itself (-1 tail)."""
    batch, sampled = to_batch(case, CPU, padded=False)
    cfg = case.config
    p = configured(cfg.num_spec_tokens, cfg.max_model_len, cfg.hidden_size, padded=False)
    before = suites.assert_caller_slot_mapping_compacted(p, interop.to_ascend_metadata(batch), batch, sampled)
    assert np.array_equal(np.asarray(batch.slot_mapping[: batch.num_tokens]), before.numpy())  # the batch: untouched
