"""An SFA draft (``Scenario.draft_attn='sfa'``, a DeepSeek V3.2 / GLM-5 MTP layer's) through the checkout's
``AscendSFAMetadataBuilder``: its kernels read device tensors (lengths, table, slots, cos and sin), so what
a step's forward reads is what the tensors it was handed hold then (``sim.impls.kit.ascend.sfa``).

- Under full graphs the checkout's draft steps replay the first pass's metadata
  (``sfa-graph-steps-replay-the-first-pass``: its rotation; on main its query offsets and key lengths
  too): the gate fails on it under the spec, by name, and passes under the defect's rules; eagerly the
  steps read their own.
- v0.21.0rc's builder writes every build's cos and sin into the global buffer (``sfa-draft-cos-sin-shared``,
  before vllm-ascend #10878): each call's first rows and its steps but the last rotate at the last step's
  positions, eagerly and in graphs alike; there the graph-steps divergence is not.
- Each break of ``sfa_breaks`` (the way the builder's history broke it) fails the serving runs by name.
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.divergence import spec_for
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import branch_divergences, generation
from sim.impls.vllm_ascend.branch_divergences import SFA_COS_SIN_SHARED
from sim.serving.run import run_scenario
from tests.checks.e2e_checks import check_implementation
from tests.checks.known_defects import DEFECT, pin_run
from tests.impls.vllm_ascend import sfa_breaks
from tests.properties.test_propose_loop import TYPICAL_SFA

pytestmark = pytest.mark.order(0)  # a few fixed serving runs: seconds into the session

FULL = dataclasses.replace(TYPICAL_SFA, graph_mode="full", capture_sizes=(2, 8))


_EVERY_BUILD_CACHED = "this checkout's SFA builder rotates every build through the global cos/sin buffer"


def _every_build_cached() -> bool:
    """Whether the checkout's generation has ``sfa-draft-cos-sin-shared`` (v0.18.0, v0.20.2rc, v0.21.0rc)."""
    return SFA_COS_SIN_SHARED.id in branch_divergences.in_force(generation.name()).DIVERGENCES


def _defect(impl):
    """``sfa-graph-steps-replay-the-first-pass`` as the checkout's generation has it (v0.21.0rc and older
    have it not: ``sfa-draft-cos-sin-shared`` instead)."""
    if _every_build_cached():
        pytest.skip(f"{_EVERY_BUILD_CACHED}, in a graph as eagerly: {SFA_COS_SIN_SHARED.id}")
    return {d.id: d for d in impl.divergences}["sfa-graph-steps-replay-the-first-pass"]


@pytest.mark.parametrize("scenario", [TYPICAL_SFA, FULL], ids=["eager", "full"])
def test_draft_steps_share_the_sfa_cos_sin_buffer(device, impl, scenario):
    """``sfa-draft-cos-sin-shared`` (v0.21.0rc): every build writes its rows' cos and sin into the global
    buffer, so each call's first rows and its steps but the last rotate at the last step's positions,
    eagerly and in full graphs: the run follows the defect (or, fixed, the spec), and the spec names the
    rope positions. Dropped from the list, the spec holds. Where the builder gathers its draft steps'
    afresh (v0.22.1rc on, since #10878), skipped."""
    if not _every_build_cached():
        pytest.skip("this checkout's SFA builder gathers each draft step's cos and sin afresh (vllm-ascend #10878)")
    name = f"sfa-cos-sin-shared-{scenario.graph_mode}"
    if SFA_COS_SIN_SHARED not in impl.divergences:  # dropped from the list: the spec holds
        check_implementation(impl, scenario, device, name)
        return
    report = run_scenario(scenario, device, impl, stop_at_first_mismatch=False)
    assert report.ok, [str(m) for m in report.mismatches[:3]]
    if pin_run(report, SFA_COS_SIN_SHARED.id) == DEFECT:
        spec = run_scenario(scenario, device, impl, rules=spec_for(impl.rules, SFA_COS_SIN_SHARED))
        assert any(m.what.startswith("step ") and "rope positions" in m.what for m in spec.mismatches), [
            str(m) for m in spec.mismatches[:3]
        ]


def test_graph_steps_replay_the_first_pass(device, impl):
    """Replayed calls' steps 2..K rotate at the first pass's rows' positions, and (main) read the first
    pass's query offsets and key lengths: the spec fails on each by name, the defect's rules describe
    every call, and the run follows the defect."""
    defect = _defect(impl)
    spec = run_scenario(FULL, device, impl, rules=spec_for(impl.rules, defect), stop_at_first_mismatch=False)
    named = {m.what.split(" (")[0].split("[")[0] for m in spec.mismatches if m.what.startswith("step ")}
    fields = {what.split(" ", 2)[2] for what in named}
    want = {"rope positions", "seq_lens", "query_start_loc"} if len(defect.rule) > 1 else {"rope positions"}
    assert want <= fields, sorted(named)
    report = run_scenario(FULL, device, impl, stop_at_first_mismatch=False)
    assert report.ok, [str(m) for m in report.mismatches[:3]]
    assert report.governed[defect.id] > 0


def test_eager_steps_rotate_at_their_own_positions(device, impl):
    """Eagerly the draft steps' cos and sin are gathered afresh (``use_cache=False``): the spec holds."""
    eager = dataclasses.replace(FULL, graph_mode="eager", capture_sizes=None)
    spec = spec_for(impl.rules, _defect(impl))
    report = run_scenario(eager, device, impl, rules=spec, stop_at_first_mismatch=False)
    assert report.ok, [str(m) for m in report.mismatches[:3]]


BREAKS = [
    (sfa_breaks.lengths_shared_across_steps, r"seq_lens"),
    (sfa_breaks.draft_rope_from_the_cache, r"rope positions"),
]


@pytest.mark.parametrize(("breaking", "match"), BREAKS, ids=[b.__name__ for b, _ in BREAKS])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_a_broken_sfa_builder_fails_by_name(monkeypatch, device, impl, breaking, match, padded):
    if breaking is sfa_breaks.draft_rope_from_the_cache and _every_build_cached():
        pytest.skip(f"{_EVERY_BUILD_CACHED}: this break is the checkout ({SFA_COS_SIN_SHARED.id})")
    cls = import_ascend("vllm_ascend.attention.sfa_v1").AscendSFAMetadataBuilder
    method = "_build" if hasattr(cls, "_build") else "build"
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    scenario = dataclasses.replace(TYPICAL_SFA, padded=padded)
    with pytest.raises(AssertionError, match=match):
        check_implementation(impl, scenario, device, f"sfa-{breaking.__name__}")
