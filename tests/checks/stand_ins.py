"""No value of a vllm-ascend run comes from the fake ``torch_npu``'s stand-ins (``fake_torch_npu``).

The fake's ``MagicMock``s exist so that vllm-ascend imports without CANN. A run must call none of them and
make no mock: a stand-in's return value (a truthy ``MagicMock``) reaching a branch or a value would be
plumbing standing in for what the gate compares. Every test runs inside ``no_stand_in_reached`` while the
fake is installed (tests/conftest.py), so every serving run, fixed or drawn, of every vllm-ascend session
is checked; data-parallel and tensor-parallel ranks check theirs with ``watched_in_rank``.
"""

from __future__ import annotations

import contextlib

import pytest

from sim.impls.kit.ascend.fake_torch_npu import stand_ins_watched


@contextlib.contextmanager
def no_stand_in_reached():
    """Fails (naming the calls) if the block calls a stand-in of the fake or makes a mock."""
    with stand_ins_watched() as touched:
        yield
    if touched:
        pytest.fail(f"the fake torch_npu's stand-ins were touched: {touched[:6]}", pytrace=False)


def watched_in_rank(*allowed: str):
    """A data-parallel rank's setup for a case (``DpCase.setup``): the stand-ins watched while the case
    runs; after it, ``RankError`` naming any touched (the rank's failure) but the calls ``allowed``, each
    as the watcher names it (``torch.npucall.current_device()``)."""
    from sim.ranks.pool import RankError

    block = stand_ins_watched()
    touched = block.__enter__()

    def check():
        block.__exit__(None, None, None)
        left = [call for call in touched if call not in allowed]
        if left:
            raise RankError(f"stand-ins touched: {left[:6]}", 0, "crash")

    return check
