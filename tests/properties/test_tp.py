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
from dataclasses import asdict

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from sim.ranks.pcp import PcpCase
from sim.ranks.pool import CollectiveMismatch
from sim.ranks.tp import TpPool, check_tp
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import FAILURE_DIR
from tests.checks.example_budget import share
from tests.checks.rank_pools import module_pools
from tests.strategies.scenarios import scenarios

pytestmark = [pytest.mark.order(-2), pytest.mark.xdist_group("tp")]

TP = share(20, at_least=1)  # multi-process: left out of mutate
SIZES = [2, 4]


@pytest.fixture(scope="module")
def pools(device):
    yield from module_pools(device, TpPool)


PATHS = {
    "lmhead": {"lmhead_tp": True},
    "sedp": {"shared_expert_dp": True},
    "both": {"lmhead_tp": True, "shared_expert_dp": True},
}


def _assert_tp(scenario, pool, device, name, proposer=None):
    problems = check_tp(scenario, pool, device, proposer=proposer)
    if problems:
        path = scenario.save(FAILURE_DIR / f"{name}.json")
        extra = f" --pcp {pool.size // scenario.tp}" if pool.size > scenario.tp else ""
        extra += f" --proposer {proposer}" if proposer else ""
        raise AssertionError("\n  ".join(problems[:6]) + f"\nreplay: python -m sim replay {path}{extra}")


SMALL = Scenario(
    num_spec_tokens=3,
    block_size=2,
    token_budget=24,
    requests=(RequestSpec(0, 30, 6), RequestSpec(0, 5, 6), RequestSpec(1, 11, 6)),
    tp=2,
    lmhead_tp=True,
)
SMALL_SEDP = dataclasses.replace(SMALL, lmhead_tp=False, shared_expert_dp=True)


@pytest.mark.order(1)
@pytest.mark.xdist_group("pcp2")  # scheduled with the PCP suite's first tests, not after the TP suite's wait
@pytest.mark.parametrize(
    "scenario, ranks",
    [
        (SMALL, 2),
        (dataclasses.replace(SMALL_SEDP, graph_mode="piecewise"), 2),
        (dataclasses.replace(SMALL_SEDP, mrope=True), 2),
        (SMALL, 4),
    ],
    ids=["lmhead-2", "sedp-2-piecewise", "sedp-2-mrope", "pcp2-lmhead-2"],
)
def test_cases_every_broken_variant_fails_equal_single_rank(device, pools, scenario, ranks):
    """Each TP path on the case its broken variants below fail on (shared-expert DP with graphs
    captured: dummy runs included; and with M-RoPE's [3, N] positions, split along the rows): run early, a TP bug fails within a minute, before the
    properties draw (and shrink) scenarios."""
    if scenario.graph_mode != "eager" and not device.supports_graphs:
        scenario = dataclasses.replace(scenario, graph_mode="eager")
    _assert_tp(scenario, pools(ranks), device, f"tp-small-{ranks}")


@pytest.mark.parametrize("size", SIZES)
@TP
@given(
    scenario=scenarios(max_reqs=4, max_iterations=10),
    tp_path=st.sampled_from(sorted(PATHS)),
    mode=st.sampled_from(["eager", "piecewise", "full"]),
    path=st.sampled_from([{}, {"mrope": True}, {"method": "eagle3"}]),
)
def test_tp_equals_single_rank(device, pools, size, scenario, tp_path, mode, path, request):
    """lm-head TP, shared-expert DP or both (drawn); padded or unpadded (drawn); each graph mode the
    path allows (drawn; lm-head TP refuses full graphs); plain, M-RoPE or eagle3 (drawn)."""
    fields = PATHS[tp_path]
    if not device.supports_graphs or (mode == "full" and fields.get("lmhead_tp")):
        mode = "eager"
    event(f"path={tp_path}")
    event(f"mode={mode}")
    scenario = dataclasses.replace(scenario, graph_mode=mode, tp=size, **fields, **path)
    _assert_tp(scenario, pools(size), device, request.node.name)


@TP
@given(
    scenario=scenarios(max_reqs=4, max_iterations=10),
    tp_path=st.sampled_from(["lmhead", "sedp"]),
    mode=st.sampled_from(["eager", "piecewise", "full"]),
)
def test_pcp_and_tp_on_one_mesh_equal_single_rank(device, pools, scenario, tp_path, mode, request):
    """2 PCP x 2 TP ranks: PCP over one group, lm-head TP or shared-expert DP (drawn) over the other."""
    fields = PATHS[tp_path]
    if not device.supports_graphs or (mode == "full" and fields.get("lmhead_tp")):
        mode = "eager"
    event(f"path={tp_path}")
    scenario = dataclasses.replace(scenario, graph_mode=mode, tp=2, **fields)
    _assert_tp(scenario, pools(4), device, request.node.name)


def test_shards_joined_in_the_wrong_order_are_caught(device, pools):
    with pytest.raises(AssertionError, match="drafts"):
        _assert_tp(SMALL, pools(2), device, "broken-tp", proposer="tests.meta.broken_tp:ShardsInRankOrderReversed")


@pytest.mark.parametrize(
    "broken",
    ["ChunksGatheredLastRankFirst", "RowsInterleaved", "ReduceScatteredLikeTheSeed"],
)
def test_broken_shared_expert_dp_is_caught(device, pools, broken):
    with pytest.raises(AssertionError, match="drafts|metadata|raised|failed"):
        _assert_tp(SMALL_SEDP, pools(2), device, f"broken-sedp-{broken}", proposer=f"tests.meta.broken_sedp:{broken}")


def test_vocab_gathered_over_the_wrong_group_is_caught(device, pools):
    with pytest.raises(AssertionError, match="drafts"):
        _assert_tp(SMALL, pools(4), device, "broken-pcp-tp", proposer="tests.meta.broken_tp:VocabGatheredOverPcpGroup")


@pytest.mark.parametrize(
    "broken, mode", [("ChunkUnpaddedOnRank1", "eager"), ("SplitSkippedInDummyRunOnRank1", "piecewise")]
)
def test_ranks_issuing_different_collectives_are_reported(device, pools, broken, mode):
    """A rank that sends fewer rows, or skips the split in its dummy runs, is reported, not hung."""
    if mode != "eager" and not device.supports_graphs:
        pytest.skip(f"device {device.name} cannot capture graphs")
    case = PcpCase(asdict(dataclasses.replace(SMALL_SEDP, graph_mode=mode)), proposer=f"tests.meta.broken_sedp:{broken}")
    with pytest.raises(CollectiveMismatch, match="different (numbers of )?collectives"):
        pools(2).run(case)


def test_ranks_padding_to_different_sizes_are_reported(device, pools):
    case = PcpCase(asdict(SMALL), proposer="tests.meta.broken_tp:UnpaddedOnRank1")
    with pytest.raises(CollectiveMismatch, match="different collectives"):
        pools(2).run(case)
