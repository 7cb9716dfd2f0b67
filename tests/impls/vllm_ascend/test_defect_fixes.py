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
import re

import pytest

from sim.impls.divergence import spec_for
from sim.impls.kit.metadata_checks import MetadataMismatch
from sim.impls.vllm_ascend import branch_divergences, generation
from sim.impls.vllm_ascend.divergences import DIVERGENCES
from sim.serving.checker import DEFECT, SPEC
from sim.serving.run import run_scenario
from tests.impls.fixes import assert_max_query_len_fix_holds, skip_unless_present
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_propose_loop import TYPICAL

FULL = dataclasses.replace(TYPICAL, graph_mode="full", capture_sizes=(4, 8))
GROUPS = dataclasses.replace(TYPICAL, **DIVERGENCES["draft-state-advanced-per-group"].setting)
MLA = dataclasses.replace(TYPICAL, **DIVERGENCES["mla-draft-cos-sin-shared"].setting)
MLA_FULL = dataclasses.replace(FULL, **DIVERGENCES["mla-draft-cos-sin-shared"].setting)
SFA_FULL = dataclasses.replace(FULL, **DIVERGENCES["sfa-graph-steps-replay-the-first-pass"].setting)
SERVED = {  # a fix -> the runs where its defect decides what attention is given, per mode
    "seq-lens-lowered": {"eager": TYPICAL, "full": FULL},
    "num-computed-from-seq-lens": {"eager": TYPICAL, "full": FULL},
    "state-advanced-once-per-step": {"eager": GROUPS},  # several draft groups run eagerly (divergences.GROUPS_EAGER)
    "mla-cos-sin-buffer-per-draft-step": {"eager": MLA, "full": MLA_FULL},
    "sfa-cos-sin-buffer-per-draft-step": {"full": SFA_FULL},  # eagerly the defect decides nothing
}
HALF_FIXES = {  # a half fix -> the defect it half fixes, the run that shows it, what its failure names
    "seq-lens-lowered-on-the-device-only": (
        "padded-seq-lens-not-lowered",
        TYPICAL,
        r"step 2: host mirror \w+ is not seq_lens .*: got \[.*\], want \[",
    ),
    "further-groups-from-the-step-before": (
        "draft-state-advanced-per-group",
        GROUPS,
        r"step 2: layer mtp.indexer.k_cache is given \w+ \[.*\], layer mtp.attn \[",
    ),
    "mla-cos-sin-of-each-draft-step": (
        "mla-draft-cos-sin-shared",
        MLA_FULL,
        r"step [23] rope positions\[0:\].*: got \[",
    ),
}


@pytest.fixture(autouse=True)
def _unchanged_vllm_ascend():
    if os.environ.get(broken_gate.ENV):
        pytest.skip(f"{broken_gate.ENV} changes vllm-ascend for the session; these tests change it themselves")


# A fix -> another defect of the same buffers, which leaves its rotation wrong where both hold (v0.18.0's SFA
# builder also writes every build's cos/sin into the global buffer): the fix alone cannot meet the spec there.
ENTANGLED = {"sfa-cos-sin-buffer-per-draft-step": "sfa-draft-cos-sin-shared"}


def _table():
    """The harness's divergence table as the checkout's generation has it, whatever the session accepts."""
    return branch_divergences.in_force(generation.name())


def _run(scenario, impl, device, rules=None):
    return run_scenario(scenario, device, impl, rules=rules or _table().RULES)


def _fix(name: str, monkeypatch, impl, device, scenario=TYPICAL):
    """(the fix ``name``'s defect's divergence, in the harness's table whatever the session accepts; the
    serving run of ``scenario`` before the fix). Skipped where the checkout under test has fixed that
    defect already."""
    defect = broken_gate.FIXES[name][0] or HALF_FIXES[name][0]
    unreached = broken_gate.unreached_builder_methods(name)
    if unreached:
        pytest.skip(f"the fix changes {', '.join(unreached)}, which this checkout's draft steps never call")
    entangled = ENTANGLED.get(name)
    if entangled in _table().DIVERGENCES:
        pytest.skip(f"{entangled} holds too (generation {generation.name()}): the fix alone cannot meet the spec")
    before = _run(scenario, impl, device)
    if defect != "unpadded-max-query-len":  # a serving run shows it; the max_query_len fix applies twice alike
        skip_unless_present(defect, before)
    broken_gate.apply(name, monkeypatch)
    return _table().DIVERGENCES[defect], before


@pytest.mark.parametrize(("name", "mode"), [(name, mode) for name, runs in SERVED.items() for mode in runs])
def test_serving_runs_of_a_fix_pass_following_the_spec(name, mode, monkeypatch, impl, device):
    """Following the spec for its defect in every call it decides, and for no defect the run before the
    fix followed the defect of."""
    scenario = SERVED[name][mode]
    divergence, before = _fix(name, monkeypatch, impl, device, scenario)
    report = _run(scenario, impl, device)
    defect = divergence.id
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    assert report.followed[(defect, SPEC)] > 0 and report.followed[(defect, DEFECT)] == 0, report.followed
    newly = {d for d, what in report.followed if what == SPEC and d != defect and not before.followed[(d, SPEC)]}
    assert not newly, report.followed


@pytest.mark.parametrize("name", list(SERVED))
def test_the_spec_of_a_fixed_defect_holds(name, monkeypatch, impl, device):
    scenario = next(iter(SERVED[name].values()))  # eager where the defect decides anything eagerly
    spec = spec_for(_table().RULES, _fix(name, monkeypatch, impl, device, scenario)[0])
    report = _run(scenario, impl, device, spec)
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_a_fixed_max_query_len_is_the_spec(monkeypatch, impl, device):
    """Handed to the builder at the first pass and compared in single calls only: the spec holds there,
    and the single-call check under the implementation's rules accepts it."""
    spec = spec_for(_table().RULES, _fix("max-query-len-compacted", monkeypatch, impl, device)[0])
    assert_max_query_len_fix_holds(impl.ops, _table().RULES, spec, device)


@pytest.mark.parametrize("name", list(HALF_FIXES))
def test_a_half_fix_fails_naming_the_values(name, monkeypatch, impl, device):
    """Device seq_lens lowered, host mirrors not: the step's attention is built on a mirror that is not
    its device tensor. The further draft groups' metadata built from the step before: the indexer
    layer attends with other lengths than the attention layer. MLA's draft steps given fresh cos/sin:
    under full graphs steps 2..K replay the rotation their capture was handed. The failure names the
    step, the field and both values (raised at the forward, or among the run's mismatches)."""
    _, scenario, match = HALF_FIXES[name]
    _fix(name, monkeypatch, impl, device, scenario)
    try:
        failures = [str(m) for m in _run(scenario, impl, device).mismatches]
    except MetadataMismatch as failure:
        failures = [str(failure)]
    assert any(re.search(match, f) for f in failures), failures[:4]


def test_every_fix_is_shown():
    """Each of ``broken_gate.FIXES`` is run here: served, single-call, or a half fix."""
    shown = {
        *SERVED,
        "max-query-len-compacted",
        *HALF_FIXES,
        "predecessor-loads-masked",  # test_rejection_sampler.py
        "reduce-sample-ids-from-the-slice-start",  # test_tensor_parallel.py: on TP ranks
        "eagle-gathers-through-the-drafts-own-processor",  # test_tensor_parallel.py: on TP ranks
        "runner-top-k-of-every-request",  # test_rejection_sampler.py: the runner's hand-off
        "torch-path-top-k-over-the-candidates",  # test_tensor_parallel_sampling.py: on TP ranks, the torch path
        "draft-model-block-table-aligned",  # test_draft_model.py: its pin, fixed
        "draft-model-grown-seq-lens-kept",  # test_draft_model.py: its pin, fixed
        "draft-model-query-starts-of-the-call",  # test_draft_model.py, where v0.22.1rc's and earlier's pin needs it
        "draft-model-slots-by-the-kernel-block",  # test_draft_model.py: its pin, fixed
    }
    assert shown == set(broken_gate.FIXES), set(broken_gate.FIXES) ^ shown
    fixed = {d for d, _ in broken_gate.FIXES.values() if d} | set(broken_gate.NO_FIX)
    tables = [DIVERGENCES, *(own for own, _ in branch_divergences.OWN.values())]
    every = {d.id for table in tables for d in table.values() if d.kind == "defect"}
    assert {d.id for d in DIVERGENCES.values() if d.kind == "defect"} <= fixed <= every, fixed ^ every
