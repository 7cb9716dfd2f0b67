"""Fixtures shared by the test rooms (the options, profiles, marks and the device and impl fixtures are the gate's plugin, tests/plugin.py)."""

from __future__ import annotations

import functools

import pytest

from tests.checks.rank_pools import worker_pools
from tests.checks.stand_ins import no_stand_in_reached as _watched


@pytest.fixture(autouse=True)
def no_stand_in_reached(request):
    """While the fake ``torch_npu`` is installed (a vllm-ascend implementation on CPU), every test runs with
    its stand-ins watched and fails naming any it calls, so every serving run the session makes is checked
    (tests/checks/stand_ins.py), unless marked ``touches_stand_ins``."""
    if request.node.get_closest_marker("touches_stand_ins"):
        yield
        return
    with _watched():
        yield


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
