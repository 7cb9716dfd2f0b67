"""tests/impls/vllm_ascend: vllm-ascend's proposer (0.23.0, or a checkout) against the core, run by ``tox -e vllm_ascend``.

Elsewhere (``tox -e sim``) they skip with the reason; ``tox -e vllm_ascend`` passes ``--impl vllm_ascend``,
so there a vllm-ascend that cannot be imported stops the session with the cause (tests/plugin.py)."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import skip_unless_importable


def pytest_collection_modifyitems(config, items):
    from sim.impls.kit.ascend.importing import unavailable_reason

    skip_unless_importable(items, Path(__file__).parent, unavailable_reason, "vllm-ascend")
