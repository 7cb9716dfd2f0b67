"""tests/impls/vllm_ascend: vllm-ascend's proposer (0.23.0, or a checkout) against the core, run by ``tox -e vllm_ascend``.

Elsewhere (``tox -e sim``) they skip with the reason; ``tox -e vllm_ascend`` passes ``--impl vllm_ascend``,
so there a vllm-ascend that cannot be imported stops the session with the cause (tests/plugin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.impls.suites import skip_unless_importable
from tests.session_impls import impl_of


def pytest_collection_modifyitems(config, items):
    from sim.impls.kit.ascend.importing import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vllm-ascend")


@pytest.fixture(scope="session")
def accepted(request) -> tuple[str, ...] | None:
    """The divergence ids the session accepts (its ``--divergences`` list), which its DP and TP ranks then
    accept too (``sim.impls.vllm_ascend.accepted``); None: no list, every divergence of the implementation."""
    if not request.config.getoption("--divergences"):
        return None
    return tuple(d.id for d in impl_of(request.node).divergences)


@pytest.fixture(scope="session")
def tp_pool(device, accepted):
    """Two TP ranks of the simulator (``sim.impls.vllm_ascend.tensor_parallel``), started once per worker
    for both TP modules (about 8 s), accepting the session's divergences."""
    from sim.impls.vllm_ascend.tensor_parallel import TpPool

    if device.name != "sim":
        pytest.skip(f"tensor-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    ranks = TpPool(2, accepted, case_timeout_s=120)
    yield ranks
    ranks.close()


@pytest.fixture
def defect_accepted(request) -> bool:
    """Whether the session accepts ``reduce-sample-ids-of-a-short-last-shard`` (its ``--divergences`` list;
    without one, every divergence): if not, TP ranks are held to the design (``TpCase.spec``)."""
    from sim.impls.vllm_ascend.tensor_parallel import REDUCE_SAMPLE_DEFECT

    return any(d.id == REDUCE_SAMPLE_DEFECT for d in impl_of(request.node).divergences)
