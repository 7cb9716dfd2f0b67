"""vllm-ascend's whole MRV2 propose loop, with the tiny MTP model and paged cache, against the reference."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from mtp.proposer import MtpProposer
from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Ops, AscendMrv2Proposer
from sim.oracle.rules import CORE
from sim.serving.run import run_scenario
from tests.impls.suites import MRV2_OVERFLOWING, assert_overflowing_steps_write_kv_at_the_last_position
from tests.impls.vllm_ascend_mrv2.cases import rules
from tests.impls.vllm_mrv2.cases import decode_case
from tests.strategies.scenarios import scenarios


@pytest.mark.parametrize("proposer_cls", [MtpProposer, AscendMrv2Proposer], ids=["core", "ascend-mrv2"])
def test_overflowing_drafts_write_kv_at_the_last_position(device, proposer_cls):
    """overflow-clamp, its consequence (``suites.assert_overflowing_steps_write_kv_at_the_last_position``)."""
    case = decode_case(max_model_len=16, num_computed=11, k=3, accepted=3)  # accepted prefix: 15 tokens
    assert_overflowing_steps_write_kv_at_the_last_position(
        device, proposer_cls, case, proposer_cls is AscendMrv2Proposer
    )


def test_the_gate_needs_the_host_length_rules(device):
    """The serving run with overflowing drafts and rejections equals the reference under the generation's
    rules, and fails under the same rules with the host lengths the core's (advanced once from the
    accepted prefix): the rules are what make it pass, not a lax comparison."""
    ok = run_scenario(MRV2_OVERFLOWING, device, ops=AscendMrv2Ops(), proposer_cls=AscendMrv2Proposer, rules=rules())
    assert ok.ok, ok.mismatches[:3]
    spec = dataclasses.replace(rules(), step_seq_lens=CORE.step_seq_lens, padded_seq_lens_lowered=True)
    broken = run_scenario(MRV2_OVERFLOWING, device, ops=AscendMrv2Ops(), proposer_cls=AscendMrv2Proposer, rules=spec)
    assert any("seq_lens" in str(m) for m in broken.mismatches), broken.mismatches[:3]


@settings(max_examples=6)
@given(scenario=scenarios())
def test_serving_runs_match_the_reference(device, scenario):
    """Whole serving runs (padded, eager): every draft the rules define and every step's metadata."""
    run = dataclasses.replace(scenario, padded=True)
    report = run_scenario(run, device, proposer_cls=AscendMrv2Proposer, rules=rules())
    assert report.ok, report.mismatches[:3]
