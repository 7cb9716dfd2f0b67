"""No value of a vllm-ascend run comes from the fake ``torch_npu``'s stand-ins (``fake_torch_npu``).

The fake's ``MagicMock``s exist so that vllm-ascend imports without CANN. A whole serving run,
padded and unpadded, must call none of them and make no mock (on data-parallel ranks too:
``watched_in_rank``, run by ``test_data_parallel.py``): a stand-in's return value (a truthy
``MagicMock``) reaching a branch or a value would be plumbing standing in for what the gate compares.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import unittest.mock

import pytest

from sim.serving.scenario import default_scenario
from tests.checks.e2e_checks import check_implementation
from tests.properties.test_propose_loop import FAMILY_FIELDS


@contextlib.contextmanager
def watching():
    """The calls made on the fake's stand-ins, and the mocks made, inside the block (filled at its end)."""
    import torch
    import torch_npu

    if not getattr(torch_npu, "_fake", False):
        pytest.skip("the real torch_npu is in use: no stand-ins")
    roots = {
        "torch.npu": torch.npu,
        "torch_npu.npu": torch_npu.npu,
        "torch_npu._C": torch_npu._C,
        "torch_npu.profiler": torch_npu.profiler,
        "torch_npu._inductor": torch_npu._inductor,
    }
    for root in roots.values():
        root.reset_mock()
    made, touched = [], []
    init = unittest.mock.NonCallableMock.__init__

    def counting(self, *args, **kwargs):
        made.append(repr(kwargs.get("name") or type(self).__name__))
        init(self, *args, **kwargs)

    with unittest.mock.patch.object(unittest.mock.NonCallableMock, "__init__", counting):
        yield touched
    touched += [f"{name}{call}" for name, root in roots.items() for call in root.mock_calls]
    touched += [f"made {m}" for m in made]


def stand_ins_touched(run) -> list[str]:
    """The calls made on the fake's stand-ins, and the mocks made, while ``run()`` runs."""
    with watching() as touched:
        run()
    return touched


def watched_in_rank(*allowed: str):
    """A data-parallel rank's setup for a case (``DpCase.setup``): the stand-ins watched while the case
    runs; after it, ``RankError`` naming any touched (the rank's failure) but the calls ``allowed``, each
    as the watcher names it (``torch.npucall.current_device()``)."""
    from sim.ranks.pool import RankError

    block = watching()
    touched = block.__enter__()

    def check():
        block.__exit__(None, None, None)
        left = [call for call in touched if call not in allowed]
        if left:
            raise RankError(f"stand-ins touched: {left[:6]}", 0, "crash")

    return check


# The draft each serving run is made with: its attention family (its builder's runs, cos/sin included), its
# method (eagle: its draft class and its method's branches; eagle3: the runner's concatenation and the fold),
# its arrival (a decode node's transferred prompts), or its runner's scheduling (async: the count copy on the
# copy stream and the next step's correction; padded only).
DRAFTS = {
    "gqa": {}, **FAMILY_FIELDS, "eagle": {"method": "eagle"}, "eagle3": {"method": "eagle3"},
    "decode-node": {"decode_node": True},
    "async-scheduling": {"async_scheduling": True},
}  # fmt: skip


def _serving_runs(impl, device, draft: str = "gqa"):
    """Padded and unpadded eagerly, and padded in full-graph mode (the graph API is ``fake_npu_graphs``'
    recorder, not a stand-in), with the draft ``DRAFTS[draft]``."""
    for padded, mode in ((True, "eager"), (False, "eager"), (True, "full")):
        if not padded and DRAFTS[draft].get("async_scheduling"):
            continue  # vLLM refuses asynchronous scheduling unpadded
        scenario = default_scenario(seed=3, num_requests=8)
        scenario = dataclasses.replace(scenario, padded=padded, max_iterations=40, graph_mode=mode, **DRAFTS[draft])
        check_implementation(impl, scenario, device, f"no-stand-in-{draft}-{padded}-{mode}")


@pytest.mark.parametrize("draft", list(DRAFTS))
def test_a_serving_run_touches_no_stand_in(impl, device, draft):
    """With each draft: the GQA, MLA or SFA builder's runs, an EAGLE-3 drafter's, a decode node's, an
    asynchronous runner's."""
    assert stand_ins_touched(functools.partial(_serving_runs, impl, device, draft)) == []


def test_a_stand_in_touched_is_seen(impl, device, monkeypatch):
    """The check itself, on a draft model that asks the fake to empty its cache (a stand-in)."""
    import torch

    from sim.impls.vllm_ascend.model import AscendTinyMtp

    forward = AscendTinyMtp.forward

    def empties_the_cache(self, *args, **kwargs):
        torch.npu.empty_cache()
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(AscendTinyMtp, "forward", empties_the_cache)
    assert any("empty_cache" in t for t in stand_ins_touched(functools.partial(_serving_runs, impl, device)))
