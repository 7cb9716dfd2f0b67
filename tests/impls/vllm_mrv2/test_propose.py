"""MRV2's whole MTPSpeculator.propose loop, with the tiny MTP model and paged cache, against the reference."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from mtp.proposer import MtpProposer
from sim.impls.vllm_mrv2.adapter import Mrv2Ops, Mrv2Proposer
from sim.impls.vllm_mrv2.divergences import RULES
from sim.serving.run import run_scenario
from tests.impls.suites import MRV2_OVERFLOWING, assert_overflowing_steps_write_kv_at_the_last_position
from tests.impls.vllm_mrv2.cases import decode_case
from tests.strategies.scenarios import scenarios


@pytest.mark.parametrize("proposer_cls", [MtpProposer, Mrv2Proposer], ids=["core", "mrv2"])
def test_overflowing_drafts_write_kv_at_the_last_position(device, proposer_cls):
    """overflow-clamp, its consequence (``suites.assert_overflowing_steps_write_kv_at_the_last_position``)."""
    case = decode_case(max_model_len=16, num_computed=11, k=3, accepted=3)  # accepted prefix: 15 tokens
    assert_overflowing_steps_write_kv_at_the_last_position(device, proposer_cls, case, proposer_cls is Mrv2Proposer)


def test_the_gate_needs_the_clamp_rule(device):
    """The serving run with overflowing drafts equals the reference under MRV2's rules, and fails under
    the core's (mask): the rule is what makes it pass, not a lax comparison."""
    ok = run_scenario(MRV2_OVERFLOWING, device, ops=Mrv2Ops(), proposer_cls=Mrv2Proposer, rules=RULES)
    assert ok.ok, ok.mismatches[:3]
    core = run_scenario(
        MRV2_OVERFLOWING,
        device,
        ops=Mrv2Ops(),
        proposer_cls=Mrv2Proposer,
        rules=dataclasses.replace(RULES, overflow_position="zero", overflow_seq_len="one"),
    )
    assert any("step" in str(m) and "positions" in str(m) for m in core.mismatches)


@settings(max_examples=12)
@given(scenario=scenarios())
def test_serving_runs_match_the_reference(device, scenario):
    """Whole serving runs (padded, eager): every draft and every step's metadata, under MRV2's rules."""
    report = run_scenario(dataclasses.replace(scenario, padded=True), device, proposer_cls=Mrv2Proposer, rules=RULES)
    assert report.ok, report.mismatches[:3]
