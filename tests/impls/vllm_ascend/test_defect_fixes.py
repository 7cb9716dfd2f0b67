"""vllm-ascend with a known defect fixed (``broken_gate.FIXES``): the spec's values pass, and say so.

A known defect is an alternative, never the expectation (docs/DESIGN.md, "Implementations under
test and their divergences"). Each fix runs here in-process, the rest of vllm-ascend as the checkout
has it: the gate's serving runs (padded, eager and in full graphs) pass on it, having followed the
spec for that defect in every call where it decides a value (so the session ends with "fixed: ...",
tests/checks/known_defects.py), and the defect's own spec holds. A half fix fails, naming the values
that disagree. The whole gate on each (``-p tests.impls.vllm_ascend.broken_gate`` with
``MTP_BROKEN_VLLM_ASCEND=NAME``, docs/DIVERGENCES-vllm-ascend.md) ends with the fixed line as its only
failure.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from sim.impls.divergence import spec_for
from sim.impls.kit.metadata_checks import MetadataMismatch
from sim.impls.vllm_ascend.divergences import DIVERGENCES, RULES
from sim.serving.checker import DEFECT, SPEC
from sim.serving.run import run_scenario
from tests.impls.fixes import assert_max_query_len_fix_holds, skip_unless_present
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_propose_loop import TYPICAL

FULL = dataclasses.replace(TYPICAL, graph_mode="full", capture_sizes=(4, 8))
SERVED = {  # a fix -> the runs where its defect decides what attention is given
    "seq-lens-lowered": (TYPICAL, FULL),
    "num-computed-from-seq-lens": (TYPICAL, FULL),
}


@pytest.fixture(autouse=True)
def _unchanged_vllm_ascend():
    if os.environ.get(broken_gate.ENV):
        pytest.skip(f"{broken_gate.ENV} changes vllm-ascend for the session; these tests change it themselves")


def _run(scenario, impl, device, rules=RULES):
    return run_scenario(scenario, device, impl, rules=rules)


def _fix(name: str, monkeypatch, impl, device, scenario=TYPICAL):
    """(the fix ``name``'s defect's divergence, in the harness's table whatever the session accepts; the
    serving run of ``scenario`` before the fix). Skipped where the checkout under test has fixed that
    defect already."""
    defect = broken_gate.FIXES[name][0] or "padded-seq-lens-not-lowered"  # the half fix's
    before = _run(scenario, impl, device)
    if defect != "unpadded-max-query-len":  # a serving run shows it; the max_query_len fix applies twice alike
        skip_unless_present(defect, before)
    broken_gate.apply(name, monkeypatch)
    return DIVERGENCES[defect], before


@pytest.mark.parametrize("name", list(SERVED))
@pytest.mark.parametrize("mode", ["eager", "full"])
def test_serving_runs_of_a_fix_pass_following_the_spec(name, mode, monkeypatch, impl, device):
    """Following the spec for its defect in every call it decides, and for no defect the run before the
    fix followed the defect of."""
    scenario = SERVED[name][mode == "full"]
    divergence, before = _fix(name, monkeypatch, impl, device, scenario)
    report = _run(scenario, impl, device)
    defect = divergence.id
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    assert report.followed[(defect, SPEC)] > 0 and report.followed[(defect, DEFECT)] == 0, report.followed
    newly = {d for d, what in report.followed if what == SPEC and d != defect and not before.followed[(d, SPEC)]}
    assert not newly, report.followed


@pytest.mark.parametrize("name", list(SERVED))
def test_the_spec_of_a_fixed_defect_holds(name, monkeypatch, impl, device):
    spec = spec_for(RULES, _fix(name, monkeypatch, impl, device)[0])
    report = _run(TYPICAL, impl, device, spec)
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_a_fixed_max_query_len_is_the_spec(monkeypatch, impl, device):
    """Handed to the builder at the first pass and compared in single calls only: the spec holds there,
    and the single-call check under the implementation's rules accepts it."""
    spec = spec_for(RULES, _fix("max-query-len-compacted", monkeypatch, impl, device)[0])
    assert_max_query_len_fix_holds(impl.ops, RULES, spec, device)


def test_a_half_fix_fails_naming_the_values(monkeypatch, impl, device):
    """Device seq_lens lowered, host mirrors not: the step's attention is built on a mirror that is not
    its device tensor; the failure names the step, the field and both values."""
    _fix("seq-lens-lowered-on-the-device-only", monkeypatch, impl, device)
    with pytest.raises(MetadataMismatch, match=r"step 2: host mirror \w+ is not seq_lens .*: got \[.*\], want \["):
        _run(TYPICAL, impl, device)


def test_every_fix_is_shown():
    """Each of ``broken_gate.FIXES`` is run here: served, single-call, or the half fix."""
    shown = {*SERVED, "max-query-len-compacted", "seq-lens-lowered-on-the-device-only"}
    assert shown == set(broken_gate.FIXES), set(broken_gate.FIXES) ^ shown
    fixed = {d for d, _ in broken_gate.FIXES.values() if d} | set(broken_gate.NO_FIX)
    assert fixed == {d.id for d in DIVERGENCES.values() if d.kind == "defect"}
