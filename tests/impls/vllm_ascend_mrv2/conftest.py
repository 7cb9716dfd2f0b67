"""tests/impls/vllm_ascend_mrv2: vllm-ascend's MRV2 MTP speculator (0.23.0, or a checkout), run by ``tox -e vllm_ascend``.

Elsewhere they skip with the reason; ``tox -e vllm_ascend`` runs them with ``--impl vllm_ascend_mrv2``."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import skip_unless_importable


def pytest_collection_modifyitems(config, items):
    from sim.impls.vllm_ascend_mrv2.generation import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vllm-ascend's MRV2 speculator")
