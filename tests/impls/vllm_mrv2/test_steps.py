"""Step 4: MRV2's decode kernels (_prepare_decode_inputs_kernel, _update_draft_inputs_kernel) and
BlockTables.compute_slot_mappings against the core."""

from __future__ import annotations

from hypothesis import given

from sim.oracle import reference
from tests.impls.vllm_mrv2.cases import MRV2, both, mrv2_step_expected
from tests.strategies.batches import batch_cases


@given(case=batch_cases())
def test_overflow_clamp_divergence(case):
    """overflow-clamp: every step equals the core's on each request whose position has not reached
    max_model_len; on the others MRV2 holds position max_model_len - 1 and seq_len max_model_len and
    writes KV at that position's slot, where the core sends the step to position 0, seq_len 1, slot -1."""
    batch, _, _, mrv2 = both(case)
    accepted = mrv2.first.accepted_seq_lens.tolist()
    base = mrv2.base_positions.tolist()
    mml = case.config.max_model_len
    for j in range(2, case.config.num_spec_tokens + 1):
        got = MRV2.advance_step(case.config, mrv2.base_positions, mrv2.first.accepted_seq_lens, batch.block_table, j)
        got = (got.positions.tolist(), got.seq_lens.tolist(), got.slot_mapping.tolist())
        assert got == mrv2_step_expected(case, accepted, j)
        core = reference.step(case, j)
        for r, b in enumerate(base):
            overflowed = b + j - 1 >= mml
            same = (got[0][r], got[1][r], got[2][r]) == (core.positions[r], core.seq_lens[r], core.slot_mapping[r])
            assert same != overflowed, (j, r)
            assert got[2][r] >= 0  # every step writes KV, an overflowing one included
