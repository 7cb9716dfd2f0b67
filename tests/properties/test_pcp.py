"""Prefill context parallel on real process groups equals one rank.

P ranks (gloo processes on the simulator, started once per module) serve the
same scenario; every rank's drafts and per-step metadata must equal the
single-rank run, which itself equals the from-scratch reference. Faults in a
rank end the case with an error naming the rank, in bounded time.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from sim.ranks.pcp import PcpCase, PcpPool, check_pcp
from sim.ranks.pool import RankFailure
from tests.checks.modes import MODE_GROUPS, per_group
from tests.checks.rank_checks import PCP_SMALL, assert_pcp
from tests.strategies.scenarios import scenarios

# Multi-process: after every single-process property, before the meta-tests.
# Under xdist each group stays on one worker, which starts only its own pool.
# The 4-rank property is the gate's longest test (~40% of it): a group of its
# own, started right after the cheap core properties, so it runs beside the
# rest instead of alone at the end (README, "Ordering and speed").
pytestmark = [pytest.mark.order(-2), pytest.mark.xdist_group("pcp2")]

PCP = per_group(4, at_least=1)  # multi-process: left out of mutate
SIZES = [
    pytest.param(2, id="2"),
    pytest.param(4, id="4", marks=[pytest.mark.xdist_group("pcp4"), pytest.mark.order(1)]),
]


@pytest.mark.order(1)
@pytest.mark.parametrize("size", SIZES)
def test_a_case_every_broken_variant_fails_equals_single_rank(device, pcp_pools, size):
    """``PCP_SMALL`` (a long prefill split over the ranks beside decodes, blocks crossed) fails on every
    broken variant below: run first on each pool, it fails a PCP bug within seconds of the pool's
    start, before the property below draws (and shrinks) scenarios."""
    assert_pcp(PCP_SMALL, pcp_pools(size), device, f"pcp-small-{size}")


@pytest.mark.parametrize("modes", MODE_GROUPS)
@pytest.mark.parametrize("size", SIZES)
@PCP
@given(scenario=scenarios(max_reqs=4, max_iterations=10), data=st.data())
def test_pcp_equals_single_rank(device, pcp_pools, size, modes, scenario, data, request):
    """Padded or unpadded (drawn), eager or graph modes (later steps captured, collectives included)."""
    mode = data.draw(st.sampled_from(modes), label="mode")
    event(f"mode={mode}")
    assert_pcp(dataclasses.replace(scenario, graph_mode=mode), pcp_pools(size), device, request.node.name)


@pytest.fixture(scope="module")
def impatient_pool(device):
    """Two ranks whose collectives give up after 5 s: a hung peer is named in seconds, not after the
    20 s that shields the healthy pools from a busy machine (5 s still lets a peer started late
    reach the first collective)."""
    if device.max_ranks < 2:
        pytest.skip(f"device {device.name} hosts {device.max_ranks} ranks, not 2")
    pool = PcpPool(2, device.name, case_timeout_s=30, collective_timeout_s=5)
    yield pool
    pool.close()


@pytest.mark.parametrize(
    "kind, message", [("raise", "rank 1 failed"), ("exit", "rank 1 exited"), ("hang", "rank 1 did not answer")]
)
def test_a_failing_rank_is_named_in_bounded_time(device, pcp_pools, impatient_pool, kind, message):
    pool = impatient_pool if kind == "hang" else pcp_pools(2)
    case = PcpCase(asdict(PCP_SMALL), fault=(1, kind, 1))
    start = time.monotonic()
    with pytest.raises(RankFailure, match=message):
        pool.run(case)
    assert time.monotonic() - start < 60


def test_a_single_rank_run_that_raises_leaves_the_pool_ready(device, pcp_pools, monkeypatch):
    """The ranks serve a case while this process runs it on one rank: if that run raises, the ranks'
    answer must not be read as the next case's."""
    import sim.ranks.pcp

    def raising(*_args):
        raise RuntimeError("single rank broke")

    with monkeypatch.context() as patch:
        patch.setattr(sim.ranks.pcp, "single_rank", raising)
        with pytest.raises(RuntimeError, match="single rank broke"):
            check_pcp(PCP_SMALL, pcp_pools(2), device)
    broken = dataclasses.replace(PCP_SMALL, seed=PCP_SMALL.seed + 1)
    assert check_pcp(broken, pcp_pools(2), device, ops="tests.meta.broken_ops:SlotPlusOne")
    assert check_pcp(PCP_SMALL, pcp_pools(2), device) == []
