"""tests/impls/vllm: vLLM 0.33.0 as a second oracle, run by ``tox -e vllm``."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import skip_unless_importable


def pytest_collection_modifyitems(config, items):
    from sim.impls.kit.vllm_interop import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vLLM oracle")
