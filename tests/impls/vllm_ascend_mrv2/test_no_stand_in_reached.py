"""A serving run of vllm-ascend's MRV2 speculator calls no stand-in of the fake ``torch_npu`` and makes
no mock: every value the gate compares is computed by its code on real tensors (the check and its
own test: ``tests/impls/vllm_ascend/test_no_stand_in_reached.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.serving.scenario import default_scenario
from tests.checks.e2e_checks import check_implementation
from tests.impls.vllm_ascend.test_no_stand_in_reached import stand_ins_touched


@pytest.mark.parametrize(
    "fields", [{}, {"method": "eagle3"}, {"decode_node": True}], ids=["mtp", "eagle3", "decode-node"]
)
def test_a_serving_run_touches_no_stand_in(impl, device, fields):
    scenario = default_scenario(seed=3, num_requests=8)
    scenario = dataclasses.replace(scenario, max_iterations=40, **fields)  # padded: its one path

    def run():
        check_implementation(impl, scenario, device, "no-stand-in-mrv2")

    assert stand_ins_touched(run) == []
