"""vllm-ascend 0.13.0 with a known defect fixed (``defect_fixes.FIXES``): the spec's values pass.

As for vllm-ascend's proposer (tests/impls/vllm_ascend/test_defect_fixes.py): a serving run where the
defect decides what attention is given passes on the fix,
having followed the spec for that defect and nothing else, and the defect's own spec holds. The whole
gate on each (``-p tests.impls.vllm_ascend_0_13.defect_fixes`` with ``MTP_FIXED_VLLM_ASCEND_0_13=NAME``)
ends with the fixed line as its only failure.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from sim.impls.divergence import spec_for
from sim.impls.vllm_ascend_0_13.adapter import Ascend013Ops, Ascend013Proposer
from sim.impls.vllm_ascend_0_13.divergences import DIVERGENCES, RULES
from sim.serving.checker import DEFECT, SPEC
from sim.serving.run import run_scenario
from tests.impls.fixes import assert_max_query_len_fix_holds
from tests.impls.vllm_ascend_0_13 import defect_fixes
from tests.properties.test_propose_loop import TYPICAL

CROSSING = dataclasses.replace(TYPICAL, block_size=2)  # draft positions cross block boundaries often
SERVED = {  # a fix -> a run where its defect decides what attention is given or what is drafted
    "slots-from-block-table": CROSSING,
    "seq-lens-lowered": TYPICAL,
}


@pytest.fixture(autouse=True)
def _unchanged_0_13():
    if os.environ.get(defect_fixes.ENV):
        pytest.skip(f"{defect_fixes.ENV} changes 0.13.0 for the session; these tests change it themselves")


def _fix(name: str, monkeypatch):
    defect_fixes.apply(name, monkeypatch)
    return DIVERGENCES[defect_fixes.FIXES[name][0]]


def _run(scenario, device, rules):
    return run_scenario(scenario, device, ops=Ascend013Ops(), proposer_cls=Ascend013Proposer, rules=rules)


@pytest.mark.parametrize("name", list(SERVED))
def test_serving_runs_of_a_fix_pass_following_the_spec(name, monkeypatch, device):
    defect = _fix(name, monkeypatch).id
    report = _run(SERVED[name], device, RULES)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    assert report.followed[(defect, SPEC)] > 0 and report.followed[(defect, DEFECT)] == 0, report.followed
    assert not any(what == SPEC for (d, what) in report.followed if d != defect), report.followed


@pytest.mark.parametrize("name", list(SERVED))
def test_the_spec_of_a_fixed_defect_holds(name, monkeypatch, device):
    report = _run(SERVED[name], device, spec_for(RULES, _fix(name, monkeypatch)))
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_a_fixed_max_query_len_is_the_spec(monkeypatch, device):
    spec = spec_for(RULES, _fix("max-query-len-compacted", monkeypatch))
    ops = Ascend013Ops()
    assert_max_query_len_fix_holds(ops, RULES, spec, device)


def test_every_fix_is_shown_and_every_defect_with_a_rule_has_one():
    assert {*SERVED, "max-query-len-compacted"} == set(defect_fixes.FIXES)
    fixed = {d for d, *_ in defect_fixes.FIXES.values()} | set(defect_fixes.NO_FIX)
    assert fixed == {d.id for d in DIVERGENCES.values() if d.kind == "defect" and d.rule}
