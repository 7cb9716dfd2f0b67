"""Steps 1-3: vLLM's _prepare_prefill_inputs_kernel under vllm-ascend's MRV2 speculator, against the core."""

from __future__ import annotations

from hypothesis import given, settings

from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Proposer
from sim.oracle import reference
from tests.impls import suites
from tests.impls.vllm_ascend_mrv2.cases import OPS, both, rules
from tests.impls.vllm_mrv2.cases import decode_case
from tests.strategies.batches import batch_cases


def test_stale_rejected_rows_divergence(device):
    """stale-rejected-rows: the rejected rows keep the buffer's ids and positions, in the ops and in what
    the first pass's forward was fed."""
    suites.assert_stale_rejected_rows(OPS, AscendMrv2Proposer, device, decode_case)


@settings(max_examples=25)  # of the ci profile's 200: the env's budget (tox.ini)
@given(case=batch_cases())
def test_unpadded_runs_the_padded_path(case):
    """no-unpadded-path: unpadded lists prepare exactly as padded rows."""
    suites.assert_unpadded_runs_the_padded_path(OPS, case)


@settings(max_examples=25)  # of the ci profile's 200: the env's budget (tox.ini)
@given(case=batch_cases())
def test_first_pass_matches_the_reference_under_its_rules(case):
    """Every first-pass field the reference defines, padded, under the generation's rules: the sample rows,
    rejected counts, the next tokens, the host lengths later steps start from, the written ids."""
    batch, _, core, got = both(case)
    want = reference.first_pass(case, True, rules())
    assert got.first.sample_indices.tolist() == want.sample_indices == core.first.sample_indices.tolist()
    assert got.first.num_rejected.tolist() == want.num_rejected
    assert got.next.next_token_ids.tolist() == want.next_tokens
    assert got.first.accepted_seq_lens.tolist() == want.accepted_seq_lens
    stale = rules().unwritten_first_pass_rows(want.query_start_loc, want.sample_indices)
    ids = got.input_ids.tolist()
    assert [v for i, v in enumerate(ids) if i not in stale] == [
        v for i, v in enumerate(want.input_ids) if i not in stale
    ]
