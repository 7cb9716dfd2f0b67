"""The differential suites of an adapter (tests/impls/vllm, tests/impls/vllm_ascend, ...) skip, with the reason,
wherever that implementation cannot be imported; its tox env runs them."""

from __future__ import annotations

from pathlib import Path

import pytest


def skip_unless_importable(items, folder: Path, unavailable_reason, label: str) -> None:
    """Mark every collected test under ``folder`` skipped with ``unavailable_reason()``, if it names one."""
    mine = [item for item in items if folder in Path(str(item.path)).parents]
    if not mine:
        return
    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"{label} unavailable: {reason}"))
