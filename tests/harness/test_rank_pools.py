"""The rank pools the multi-rank properties run on: a faulty rank ends the case with an error naming the
rank, in bounded time, and a run that raises in this process leaves the pool ready for the next case."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict

import pytest

from sim.ranks.pcp import PcpCase, PcpPool, check_pcp
from sim.ranks.pool import RankFailure
from tests.checks.rank_checks import PCP_SMALL

# after the harness's quick tests; one worker, which starts one pool of two ranks
pytestmark = [pytest.mark.order(-3), pytest.mark.xdist_group("pcp2")]


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
