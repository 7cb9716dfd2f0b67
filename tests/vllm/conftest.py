"""tests/vllm: vLLM 0.33.0 as a second oracle. Every test here is skipped, with the
reason, where vllm cannot be imported (run them with ``tox -e vllm``)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    mine = [item for item in items if HERE in Path(str(item.path)).parents]
    if not mine:
        return
    from sim.impls.vllm.interop import unavailable_reason

    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"vLLM oracle unavailable: {reason}"))
