"""tests/vllm_ascend_0_13: vllm-ascend 0.13.0's MtpProposer against the core. Every test here is skipped,
with the reason, where vllm-ascend 0.13.0 cannot be imported (run them with ``tox -e vllm_ascend_0_13``)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    if not mine:
        return
    from sim.impls.vllm_ascend_0_13.importing import unavailable_reason

    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"vllm-ascend 0.13 unavailable: {reason}"))
