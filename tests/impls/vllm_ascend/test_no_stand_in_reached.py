"""The stand-in check itself (``tests/checks/stand_ins.py``): every test of a session on the fake
``torch_npu`` runs inside it, and a run that touches a stand-in fails it, naming the call."""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.kit.ascend import fake_torch_npu
from sim.serving.scenario import default_scenario
from tests.checks.e2e_checks import check_implementation
from tests.checks.stand_ins import no_stand_in_reached


def test_every_test_runs_watched(request):
    assert fake_torch_npu.is_installed()
    assert "no_stand_in_reached" in request.fixturenames


@pytest.mark.touches_stand_ins
def test_a_stand_in_touched_fails_the_test(impl, device, monkeypatch):
    """A draft model that asks the fake to empty its cache (a stand-in) in a serving run."""
    import torch

    from sim.impls.vllm_ascend.model import AscendTinyMtp

    forward = AscendTinyMtp.forward

    def empties_the_cache(self, *args, **kwargs):
        torch.npu.empty_cache()
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(AscendTinyMtp, "forward", empties_the_cache)
    scenario = dataclasses.replace(default_scenario(seed=3, num_requests=4), max_iterations=8)
    with pytest.raises(pytest.fail.Exception, match="empty_cache"), no_stand_in_reached():
        check_implementation(impl, scenario, device, "stand-in-touched")
