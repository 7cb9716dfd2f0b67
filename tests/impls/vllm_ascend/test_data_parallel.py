"""vllm-ascend's drafter on two data-parallel ranks (``sim.impls.vllm_ascend.data_parallel``): each rank
drafts what the reference drafts for its own batch, and every rank's draft forwards run at the same
DP-padded size, a rank without requests running dummy batches in lockstep. Under a changed vllm-ascend
(``MTP_BROKEN_VLLM_ASCEND``) the ranks run it too (``broken_gate.apply_in_rank``); each DP break
(``dp_breaks``) is seen failing here."""

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


def _ranks(device) -> DpPool:
    if device.name != "sim":
        pytest.skip(f"data-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    return DpPool(2, case_timeout_s=240)


@pytest.fixture(scope="module")
def pool(device):
    ranks = _ranks(device)
    yield ranks
    ranks.close()


def _case(*scenarios, setup=(SETUP,)) -> DpCase:
    return DpCase([dataclasses.asdict(s) if s is not None else None for s in scenarios], setup=setup)


@pytest.mark.order(0)
def test_dp_ranks_with_other_batches_draft_their_own_and_pad_alike(pool):
    assert check_dp(_case(TYPICAL, SMALL), pool) == []


@pytest.mark.order(0)
def test_an_idle_dp_rank_runs_dummy_batches_in_lockstep(pool):
    assert check_dp(_case(SMALL, None), pool) == []


BREAKS = {
    "dp-draft-runs-its-own-size": (dp_breaks.draft_runs_its_own_size, "AssertionError: 12 4"),
    "dp-dummy-run-skips-the-sync": (dp_breaks.dummy_run_skips_the_dp_sync, "_synchronize_dp_ranks"),
}


@pytest.mark.parametrize("variant", sorted(BREAKS))
def test_each_dp_break_is_caught(device, variant):
    """A changed vllm-ascend in each DP class fails, naming the step and the collectives it met
    (the first through vLLM's own check of the DP sizes, ``DPMetadata.make``)."""
    assert broken_gate.VARIANTS[variant][1] is BREAKS[variant][0]
    ranks = _ranks(device)
    try:
        with pytest.raises(RankFailure, match=BREAKS[variant][1]) as failed:
            check_dp(_case(TYPICAL, SMALL, setup=(SETUP, variant)), ranks)
        assert "at DP step " in str(failed.value)
    finally:
        ranks.close()
