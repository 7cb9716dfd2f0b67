"""vllm-ascend's MRV2 speculator with a known defect fixed (``broken_gate.FIXES``): the spec's values pass.

As for vllm-ascend's V1 proposer (tests/impls/vllm_ascend/test_defect_fixes.py): the serving runs pass
on a fix, having followed the spec for its defect in every call where it decides what attention is
given, and nothing else; the defect's own spec holds. The whole gate on each (``-p
tests.impls.vllm_ascend_mrv2.broken_gate`` with ``MTP_BROKEN_VLLM_ASCEND_MRV2=NAME``) ends with the
fixed line as its only failure.
"""

from __future__ import annotations

import os

import pytest

from sim.impls.divergence import spec_for
from sim.impls.vllm_ascend_mrv2 import divergences, generation
from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Ops, AscendMrv2Proposer
from sim.serving.checker import DEFECT, SPEC
from sim.serving.run import run_scenario
from tests.impls.fixes import skip_unless_present
from tests.impls.suites import MRV2_OVERFLOWING
from tests.impls.vllm_ascend_mrv2 import broken_gate
from tests.impls.vllm_ascend_mrv2.cases import rules
from tests.properties.test_propose_loop import TYPICAL


@pytest.fixture(autouse=True)
def _unchanged_speculator():
    if os.environ.get(broken_gate.ENV):
        pytest.skip(f"{broken_gate.ENV} changes the speculator for the session; these tests change it themselves")


def _fix(name: str, monkeypatch, device):
    """The speculator with the fix ``name``: its defect's divergence."""
    defect, *_, gen = broken_gate.FIXES[name]
    if gen not in (None, generation.speculator_name()):
        pytest.skip(f"{name} fixes vllm-ascend {gen}'s {defect}; this is {generation.speculator_name()}")
    skip_unless_present(defect, _run(TYPICAL, device, rules()))
    broken_gate.apply(name, monkeypatch)
    return divergences.in_force(generation.name()).DIVERGENCES[defect]


def _run(scenario, device, rules_):
    return run_scenario(scenario, device, ops=AscendMrv2Ops(), proposer_cls=AscendMrv2Proposer, rules=rules_)


@pytest.mark.parametrize("scenario", [TYPICAL, MRV2_OVERFLOWING], ids=["typical", "overflowing"])
@pytest.mark.parametrize("name", list(broken_gate.FIXES))
def test_serving_runs_of_a_fix_pass_following_the_spec(name, scenario, monkeypatch, device):
    defect = broken_gate.FIXES[name][0]
    shown = _run(scenario, device, rules()).followed[(defect, DEFECT)]  # before the fix: can it show it gone?
    _fix(name, monkeypatch, device)
    if not shown:  # main's overflowing run: every step's batch bound is max_model_len, lowered or not
        pytest.skip(f"{defect}: no call of this scenario follows it on vllm-ascend {generation.name()}")
    report = _run(scenario, device, rules())
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    assert report.followed[(defect, SPEC)] > 0 and report.followed[(defect, DEFECT)] == 0, report.followed
    assert not any(what == SPEC for (d, what) in report.followed if d != defect), report.followed


@pytest.mark.parametrize("name", list(broken_gate.FIXES))
def test_the_spec_of_a_fixed_defect_holds(name, monkeypatch, device):
    report = _run(TYPICAL, device, spec_for(rules(), _fix(name, monkeypatch, device)))
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_every_defect_of_0_23_0_has_a_fix():
    fixed = {d for d, *_ in broken_gate.FIXES.values()}
    assert fixed == {d.id for d in divergences.in_force("0.23.0").DIVERGENCES.values() if d.kind == "defect" and d.rule}
