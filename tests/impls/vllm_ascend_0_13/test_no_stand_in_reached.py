"""A serving run of vllm-ascend 0.13's ``MtpProposer`` calls no stand-in of the fake ``torch_npu`` and makes
no mock: every value the gate compares is computed by its code on real tensors (the check and its own
test: ``tests/impls/vllm_ascend/test_no_stand_in_reached.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.serving.scenario import default_scenario
from tests.checks.e2e_checks import check_implementation
from tests.impls.vllm_ascend.test_no_stand_in_reached import stand_ins_touched


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_a_serving_run_touches_no_stand_in(impl, device, padded):
    scenario = dataclasses.replace(default_scenario(seed=3, num_requests=8), max_iterations=40, padded=padded)

    def run():
        check_implementation(impl, scenario, device, f"no-stand-in-0.13-{padded}")

    assert stand_ins_touched(run) == []
