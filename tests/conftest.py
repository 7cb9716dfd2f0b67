"""Fixtures shared by the test rooms (the options, profiles, marks and the device and impl fixtures are the gate's plugin, tests/plugin.py)."""

from __future__ import annotations

import functools

import pytest

from tests.checks.rank_pools import worker_pools


@pytest.fixture(scope="session")
def rank_pools(device):
    """``get(pool_cls, size)``: the rank pools of this test worker (tests/checks/rank_pools.py)."""
    yield from worker_pools(device)


@pytest.fixture(scope="session")
def pcp_pools(rank_pools):
    """``get(size)``: this worker's pool of ``size`` PCP ranks."""
    from sim.ranks.pcp import PcpPool

    return functools.partial(rank_pools, PcpPool)


@pytest.fixture(scope="session")
def tp_pools(rank_pools):
    """``get(size)``: this worker's pool of ``size`` TP ranks."""
    from sim.ranks.tp import TpPool

    return functools.partial(rank_pools, TpPool)
