"""vllm-ascend's drafter on two data-parallel ranks (``sim.impls.vllm_ascend.data_parallel``), eagerly and
under full graphs: each rank drafts what the reference drafts for its own batch, and every rank's draft
forwards share one DP view (``num_tokens_across_dp``, graph mode), a rank without requests running dummy
batches in lockstep. Under a changed vllm-ascend (``MTP_BROKEN_VLLM_ASCEND``) the ranks run it too
(``broken_gate.apply_in_rank``); each DP break (``dp_breaks``) is seen failing here."""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.vllm_ascend.data_parallel import DpCase, DpPool, check_dp
from sim.ranks.pool import RankFailure
from sim.serving.scenario import RequestSpec
from tests.impls.vllm_ascend import broken_gate, dp_breaks
from tests.properties.test_propose_loop import TYPICAL

SETUP = "tests.impls.vllm_ascend.broken_gate:apply_in_rank"
SMALL = dataclasses.replace(TYPICAL, seed=1, requests=(RequestSpec(0, 4, 4), RequestSpec(2, 2, 6)))
MODES = ("eager", "full")


def _ranks(device) -> DpPool:
    if device.name != "sim":
        pytest.skip(f"data-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    return DpPool(2, case_timeout_s=120)


@pytest.fixture(scope="module")
def pool(device):
    ranks = _ranks(device)
    yield ranks
    ranks.close()


def _case(mode, *scenarios, setup=(SETUP,)) -> DpCase:
    ranks = [dataclasses.asdict(dataclasses.replace(s, graph_mode=mode)) if s else None for s in scenarios]
    return DpCase(ranks, setup=setup)


@pytest.mark.order(0)
@pytest.mark.parametrize("mode", MODES)
def test_dp_ranks_with_other_batches_draft_their_own_and_share_a_dp_view(pool, mode):
    assert check_dp(_case(mode, TYPICAL, SMALL), pool) == []


@pytest.mark.order(0)
@pytest.mark.parametrize("mode", MODES)
def test_an_idle_dp_rank_runs_dummy_batches_in_lockstep(pool, mode):
    assert check_dp(_case(mode, SMALL, None), pool) == []


BREAKS = {  # variant -> (its break, its mode, what the failure says)
    "dp-draft-runs-its-own-size": (dp_breaks.draft_runs_its_own_size, "eager", "AssertionError: 12 4"),
    "dp-dummy-run-skips-the-sync": (dp_breaks.dummy_run_skips_the_dp_sync, "eager", "at DP step"),
    "dp-dummy-replays-a-graph-whatever-its-peers-run": (
        dp_breaks.dummy_replays_a_graph_whatever_its_peers_run,
        "full",
        "one num_tokens_across_dp and graph mode",
    ),
}


@pytest.mark.parametrize("variant", sorted(BREAKS))
def test_each_dp_break_is_caught(device, variant):
    """A changed vllm-ascend in each DP class fails: through vLLM's own check of the DP sizes
    (``DPMetadata.make``), naming the step and the collectives a rank met, or naming the forwards'
    DP views."""
    breaking, mode, said = BREAKS[variant]
    assert broken_gate.VARIANTS[variant][1] is breaking
    ranks = _ranks(device)
    try:
        with pytest.raises((RankFailure, AssertionError), match=said):
            assert check_dp(_case(mode, TYPICAL, SMALL, setup=(SETUP, variant)), ranks) == []
    finally:
        ranks.close()
