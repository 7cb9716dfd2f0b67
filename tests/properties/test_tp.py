"""Tensor parallel on real process groups equals one rank: lm-head TP, shared-expert DP, both.

TP ranks (gloo processes on the simulator, started once per module) serve
the same scenario with the vocabulary split over them (lm-head TP) and/or
the draft layer's rows split over them (shared-expert DP); every rank's
drafts and per-step metadata must equal the single-rank run, which itself
equals the from-scratch reference. Sample rows are padded to the size all
ranks agree on; more rows than that is an error, never a cut. Shared-expert
DP pads the rows to a multiple of the group size and cuts the padding off
after the gather.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.checks.modes import MODE_GROUPS, NEEDS_GRAPHS, per_group
from tests.checks.rank_checks import TP_SMALL, TP_SMALL_SEDP, assert_tp
from tests.strategies.scenarios import scenarios

pytestmark = [pytest.mark.order(-2), pytest.mark.xdist_group("tp")]

TP = per_group(20, at_least=1)  # multi-process: left out of mutate
SIZES = [2, 4]


PATHS = {
    "lmhead": {"lmhead_tp": True},
    "sedp": {"shared_expert_dp": True},
    "both": {"lmhead_tp": True, "shared_expert_dp": True},
}


@pytest.mark.order(1)
@pytest.mark.xdist_group("pcp2")  # scheduled with the PCP suite's first tests, not after the TP suite's wait
@pytest.mark.parametrize(
    "scenario, ranks",
    [
        (TP_SMALL, 2),
        pytest.param(dataclasses.replace(TP_SMALL_SEDP, graph_mode="piecewise"), 2, marks=NEEDS_GRAPHS),
        (dataclasses.replace(TP_SMALL_SEDP, mrope=True), 2),
        (TP_SMALL, 4),
    ],
    ids=["lmhead-2", "sedp-2-piecewise", "sedp-2-mrope", "pcp2-lmhead-2"],
)
def test_cases_every_broken_variant_fails_equal_single_rank(device, tp_pools, scenario, ranks):
    """Each TP path on the case its broken variants below fail on (shared-expert DP with graphs
    captured: dummy runs included; and with M-RoPE's [3, N] positions, split along the rows): run early, a TP bug fails within a minute, before the
    properties draw (and shrink) scenarios."""
    assert_tp(scenario, tp_pools(ranks), device, f"tp-small-{ranks}")


def _mode_for(data, modes, fields) -> str:
    """A mode of ``modes`` the TP path allows: lm-head TP refuses full graphs, so it runs piecewise."""
    mode = data.draw(st.sampled_from(modes), label="mode")
    return "piecewise" if mode == "full" and fields.get("lmhead_tp") else mode


@pytest.mark.parametrize("modes", MODE_GROUPS)
@pytest.mark.parametrize("size", SIZES)
@TP
@given(
    scenario=scenarios(max_reqs=4, max_iterations=10),
    tp_path=st.sampled_from(sorted(PATHS)),
    path=st.sampled_from([{}, {"mrope": True}, {"method": "eagle3"}]),
    data=st.data(),
)
def test_tp_equals_single_rank(device, tp_pools, size, modes, scenario, tp_path, path, data, request):
    """lm-head TP, shared-expert DP or both (drawn); padded or unpadded (drawn); each graph mode the
    path allows (drawn; lm-head TP refuses full graphs); plain, M-RoPE or eagle3 (drawn)."""
    fields = PATHS[tp_path]
    mode = _mode_for(data, modes, fields)
    event(f"path={tp_path}")
    event(f"mode={mode}")
    scenario = dataclasses.replace(scenario, graph_mode=mode, tp=size, **fields, **path)
    assert_tp(scenario, tp_pools(size), device, request.node.name)


@pytest.mark.parametrize("modes", MODE_GROUPS)
@TP
@given(scenario=scenarios(max_reqs=4, max_iterations=10), tp_path=st.sampled_from(["lmhead", "sedp"]), data=st.data())
def test_pcp_and_tp_on_one_mesh_equal_single_rank(device, tp_pools, modes, scenario, tp_path, data, request):
    """2 PCP x 2 TP ranks: PCP over one group, lm-head TP or shared-expert DP (drawn) over the other."""
    fields = PATHS[tp_path]
    mode = _mode_for(data, modes, fields)
    event(f"path={tp_path}")
    scenario = dataclasses.replace(scenario, graph_mode=mode, tp=2, **fields)
    assert_tp(scenario, tp_pools(4), device, request.node.name)
