"""tests/impls/vllm_ascend: vllm-ascend 0.23.0's proposer against the core, run by ``tox -e vllm_ascend``."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import skip_unless_importable


def pytest_collection_modifyitems(config, items):
    from sim.impls.vllm_ascend.importing import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vllm-ascend")
