"""vllm-ascend's whole _propose loop, driven with the tiny MTP model and paged cache.

Per step, what the attention saw must be vllm-ascend's rule (first pass: the
reference's; steps 2..K: ``cases.ascend_step_expected``); in unpadded mode the
drafts must equal the from-scratch reference (margin-aware, as in the gate).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings

from sim.impls.vllm_ascend.adapter import AscendProposer
from sim.oracle import reference
from sim.oracle.cases import to_batch
from sim.oracle.compare import MARGIN_TOLERANCE, compare_iteration_drafts
from sim.serving.run import build_models, serve
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.strategies.scenarios import scenarios
from tests.vllm_ascend.cases import CPU, ascend_step_expected


def run_checked(scenario: Scenario, device) -> list[str]:
    """Unexplained mismatches over a whole serving run."""
    model, target = build_models(scenario, CPU)
    sim = ServingSim(scenario, target)
    proposer = AscendProposer(sim.config, model, device)
    proposer.record()
    ref_model = build_models(scenario, CPU)[0]
    bad = []
    for iteration, drafts, _ in serve(sim, proposer, device, scenario):
        it, case = iteration.index, iteration.case
        first, trace = reference.first_pass(case, scenario.padded), proposer.trace
        for name, got, want in (
            ("seq_lens", trace[0].seq_lens.tolist(), first.seq_lens),
            ("slot_mapping", trace[0].slot_mapping.tolist(), first.slot_mapping),
            ("query_start_loc", trace[0].query_start_loc.tolist(), first.query_start_loc),
            ("sample_indices", trace[0].sample_indices.tolist(), first.sample_indices),
        ):
            bad += [f"it {it}: first pass {name}: {got} != {want}"] * (got != want)
        start = first.seq_lens  # padded: seq_len (not lowered); unpadded: seq_len - n_rej
        for rec in trace[1:]:
            want = ascend_step_expected(case, start, first.accepted_seq_lens, rec.step)
            got = (rec.positions.tolist(), rec.seq_lens.tolist(), rec.slot_mapping.tolist())
            bad += [f"it {it}: step {rec.step}: {got} != {want}"] * (got != want)
            bad += [f"it {it}: step {rec.step} padding rows write KV"] * bool((rec.padding_slots != -1).any())
        if not scenario.padded:  # padded drafts differ by design (padded-seq-lens-not-lowered)
            mismatches, _, _ = compare_iteration_drafts(
                iteration, drafts, ref_model, target, scenario, MARGIN_TOLERANCE[torch.float32]
            )
            bad += [str(m) for m in mismatches if "overflow" not in str(m)]
        if bad:
            break
    return bad


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@settings(max_examples=max(1, settings.default.max_examples // 4), deadline=None)
@given(scenario=scenarios())
def test_full_loop_follows_the_ascend_rule(device, padded, scenario):
    bad = run_checked(dataclasses.replace(scenario, padded=padded), device)
    assert not bad, "\n".join(bad[:6])


def test_steps_run_at_first_pass_rows(device):
    """mtp-steps-run-padded-rows: steps 2..K run at the first pass's row count; the rows past B write no KV."""
    from tests.vllm.test_propose import _at_the_end

    case = _at_the_end()
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=16, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU)
    batch, sampled = to_batch(case, CPU, padded=True)
    proposer = AscendProposer(case.config, model, device)
    proposer.record()
    proposer.propose(batch, sampled)
    rows = [rec.rows for rec in proposer.trace]
    assert rows == [batch.num_tokens] * 3 and batch.num_reqs == 1 < batch.num_tokens
    for rec in proposer.trace[1:]:
        assert rec.padding_slots.tolist() == [-1] * (batch.num_tokens - 1)
