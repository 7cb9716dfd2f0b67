"""tests/vllm_ascend: vllm-ascend 0.23.0's proposer against the core. Every test here is skipped, with
the reason, where vllm_ascend cannot be imported (run them with ``tox -e vllm_ascend``)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    if not mine:
        return
    from sim.impls.vllm_ascend.importing import unavailable_reason

    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"vllm-ascend unavailable: {reason}"))
