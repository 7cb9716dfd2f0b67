"""Steps 1-3: MRV2's _prepare_prefill_inputs_kernel (with the runner's sampler counts) against the core."""

from __future__ import annotations

from hypothesis import given

from sim.impls.vllm_mrv2.adapter import Mrv2Proposer
from sim.oracle import reference
from sim.oracle.cases import to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from tests.impls.vllm_mrv2.cases import CORE, CPU, MRV2, both, decode_case
from tests.strategies.batches import batch_cases


def test_stale_rejected_rows_divergence(device):
    """stale-rejected-rows: of a request that rejected 2 of its 3 drafts, the first pass writes ids and
    positions up to the sample row only; its 2 rejected rows keep the buffer's values (zeros on a fresh
    speculator), where the core shifts the ids and copies the target's positions into every row."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    batch, sampled = to_batch(case, CPU, padded=True)
    core = CORE.prepare_call(case.config, batch, sampled)
    ops = MRV2.prepare_call(case.config, batch, sampled)
    assert ops.first.sample_indices.tolist() == core.first.sample_indices.tolist() == [1]
    assert ops.input_ids[:2].tolist() == core.input_ids[:2].tolist()
    assert ops.input_ids[2:].tolist() == [0, 0] != core.input_ids[2:].tolist()
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=64, requests=(RequestSpec(0, 4, 4),))
    proposer = Mrv2Proposer(case.config, build_models(scenario, CPU)[0], device)
    proposer.record()
    proposer.propose(batch, sampled)
    positions = proposer.trace[0].positions.tolist()
    assert positions[:2] == [10, 11] and positions[2:] == [0, 0]  # target positions 12, 13 never copied


@given(case=batch_cases())
def test_unpadded_runs_the_padded_path(case):
    """no-unpadded-path: the same batch with unpadded lists prepares exactly as padded (every row kept,
    seq_lens not lowered); the core's unpadded path drops the rejected rows."""
    padded, unpadded = (MRV2.prepare_call(case.config, *to_batch(case, CPU, p)) for p in (True, False))
    for name in ("token_indices", "query_start_loc", "seq_lens", "accepted_seq_lens", "sample_indices"):
        assert getattr(padded.first, name).tolist() == getattr(unpadded.first, name).tolist(), name
    assert padded.next.next_token_ids.tolist() == unpadded.next.next_token_ids.tolist()
    want = reference.first_pass(case, padded=False)
    dropped = sum(want.num_rejected) > 0
    assert (unpadded.first.token_indices.tolist() != want.token_indices) == dropped


def test_a_request_whose_drafts_were_all_rejected_samples_its_first_row():
    """Steps 1-2 agree with the core on a batch the divergences do not touch: the next token is the
    last sampled one, the sample row the last accepted one, the rejected count K + 1 - sampled."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=0)
    _, _, core, mrv2 = both(case)
    assert mrv2.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [11]
    assert mrv2.first.num_rejected.tolist() == core.first.num_rejected.tolist() == [3]
    assert mrv2.first.sample_indices.tolist() == [0]
