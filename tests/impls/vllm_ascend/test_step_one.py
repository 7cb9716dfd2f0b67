"""Step 1 (next token, valid count): vllm-ascend's prepare_next_token_ids_padded (discard indices and a
count) and vLLM 0.23's prepare_next_token_ids_cpu against the core."""

from __future__ import annotations

import pytest
from hypothesis import given

from sim.impls.kit.ascend import interop
from sim.impls.vllm_ascend import generation
from sim.impls.vllm_ascend.branch_divergences import in_force
from sim.impls.vllm_ascend.build import configured
from sim.oracle.cases import to_batch
from tests.impls import suites
from tests.impls.suites import CPU
from tests.impls.vllm_ascend.cases import ASCEND
from tests.strategies.batches import batch_cases


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_next_tokens_match_core(padded, case):
    """With the batch's own backup as the last known token, vllm-ascend and the core agree everywhere."""
    suites.assert_next_tokens_match_core(ASCEND, case, padded)


@given(case=batch_cases())
def test_backup_token_divergence(case):
    """backup-token: a discarded request (partial prefill whose prompt runs past seq_len) continues from
    get_token_id(num_tokens_no_spec - 1) in the padded path; every other request from the core's token."""
    cfg = case.config
    p = configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size)

    def padded(batch, sampled, s):
        idx, n = interop.discard_indices(sampled, CPU)
        return generation.next_token_ids_padded(p, batch, sampled.padded, s.requests, s.input_batch, idx, n)[0]

    divergent = "backup-token" in in_force(generation.name()).DIVERGENCES  # not in v0.18.0: the spec
    suites.assert_backup_token(case, padded, divergent)


def test_discard_is_by_index_and_count():
    """Only the first ``num_discarded_requests`` indices are discarded: a count of 0 discards nothing."""
    case = suites.one_decode(16, [3, 4])
    batch, sampled = to_batch(case, CPU, padded=True)
    step_one = interop.to_step_one_inputs(batch, sampled, 16)
    p = configured(2, 4, 64, 8)
    idx = interop.discard_indices(sampled, CPU)[0].new_tensor([0])
    args = (sampled.padded, step_one.requests, step_one.input_batch, idx)
    kept, counts = generation.next_token_ids_padded(p, batch, *args, 0)
    assert kept.tolist() == [4] and counts.tolist() == [2]
    dropped, counts = generation.next_token_ids_padded(p, batch, *args, 1)
    assert dropped.tolist() == [int(sampled.backup[0])] and counts.tolist() == [0]
