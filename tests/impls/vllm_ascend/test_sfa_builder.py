"""An SFA draft (``Scenario.draft_attn='sfa'``, a DeepSeek V3.2 / GLM-5 MTP layer's) through the checkout's
``AscendSFAMetadataBuilder``: its kernels read device tensors (lengths, table, slots, cos and sin), so what
a step's forward reads is what the tensors it was handed hold then (``sim.impls.vllm_ascend.sfa``).

- Under full graphs the checkout's draft steps replay the first pass's metadata
  (``sfa-graph-steps-replay-the-first-pass``: its rotation; on main its query offsets and key lengths
  too): the gate fails on it under the spec, by name, and passes under the defect's rules; eagerly the
  steps read their own.
- Each break of ``sfa_breaks`` (the way the builder's history broke it) fails the serving runs by name.
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.divergence import spec_for
from sim.impls.kit.ascend.importing import import_ascend
from sim.serving.run import run_scenario
from tests.checks.e2e_checks import check_implementation
from tests.impls.vllm_ascend import sfa_breaks
from tests.properties.test_propose_loop import TYPICAL_SFA

pytestmark = pytest.mark.order(0)  # a few fixed serving runs: seconds into the session

FULL = dataclasses.replace(TYPICAL_SFA, graph_mode="full", capture_sizes=(2, 8))


def _defect(impl):
    """``sfa-graph-steps-replay-the-first-pass`` as the checkout's generation has it."""
    return {d.id: d for d in impl.divergences}["sfa-graph-steps-replay-the-first-pass"]


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
    cls = import_ascend("vllm_ascend.attention.sfa_v1").AscendSFAMetadataBuilder
    monkeypatch.setattr(cls, "_build", breaking(cls._build))
    scenario = dataclasses.replace(TYPICAL_SFA, padded=padded)
    with pytest.raises(AssertionError, match=match):
        check_implementation(impl, scenario, device, f"sfa-{breaking.__name__}")
