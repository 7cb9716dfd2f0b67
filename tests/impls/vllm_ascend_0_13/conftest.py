"""tests/impls/vllm_ascend_0_13: vllm-ascend 0.13.0's MtpProposer against the core, run by ``tox -e vllm_ascend_0_13``."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import skip_unless_importable


def pytest_collection_modifyitems(config, items):
    from sim.impls.vllm_ascend_0_13.importing import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vllm-ascend 0.13")
