"""Step 4: MRV2's decode kernels (_prepare_decode_inputs_kernel, _update_draft_inputs_kernel) and
BlockTables.compute_slot_mappings against the core."""

from __future__ import annotations

from hypothesis import given

from tests.impls import suites
from tests.impls.vllm_mrv2.cases import MRV2, mrv2_step_expected
from tests.strategies.batches import batch_cases


@given(case=batch_cases())
def test_overflow_clamp_divergence(case):
    """overflow-clamp: every step equals the core's on each request whose position has not reached
    max_model_len; on the others MRV2 holds position max_model_len - 1 and seq_len max_model_len and
    writes KV at that position's slot, where the core sends the step to position 0, seq_len 1, slot -1."""
    mml = case.config.max_model_len
    steps = suites.assert_steps_match(MRV2, case, True, mrv2_step_expected, lambda b, j: b + j - 1 >= mml)
    for _, _, slots in steps:
        assert all(slot >= 0 for slot in slots)  # every step writes KV, an overflowing one included
