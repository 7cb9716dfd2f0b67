"""Steps 1-3: MRV2's _prepare_prefill_inputs_kernel (with the runner's sampler counts) against the core."""

from __future__ import annotations

from hypothesis import given

from sim.impls.vllm_mrv2.adapter import Mrv2Proposer
from tests.impls import suites
from tests.impls.vllm_mrv2.cases import MRV2, both, decode_case
from tests.strategies.batches import batch_cases


def test_stale_rejected_rows_divergence(device):
    """stale-rejected-rows: of a request that rejected 2 of its 3 drafts, the first pass writes ids and
    positions up to the sample row only; its 2 rejected rows keep the buffer's values (zeros on a fresh
    speculator), where the core shifts the ids and copies the target's positions into every row."""
    suites.assert_stale_rejected_rows(MRV2, Mrv2Proposer, device, decode_case)


@given(case=batch_cases())
def test_unpadded_runs_the_padded_path(case):
    """no-unpadded-path: the same batch with unpadded lists prepares exactly as padded (every row kept,
    seq_lens not lowered); the core's unpadded path drops the rejected rows."""
    suites.assert_unpadded_runs_the_padded_path(MRV2, case)


def test_a_request_whose_drafts_were_all_rejected_samples_its_first_row():
    """Steps 1-2 agree with the core on a batch the divergences do not touch: the next token is the
    last sampled one, the sample row the last accepted one, the rejected count K + 1 - sampled."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=0)
    _, _, core, mrv2 = both(case)
    assert mrv2.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [11]
    assert mrv2.first.num_rejected.tolist() == core.first.num_rejected.tolist() == [3]
    assert mrv2.first.sample_indices.tolist() == [0]
