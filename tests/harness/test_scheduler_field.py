"""A scenario's scheduler (``Scenario.scheduler``, ``kv_blocks``): what it takes and what it refuses, by name."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sim.serving.scenario import Scenario

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"scheduler": "fifo"}, r"scheduler='fifo': expected one of \('own', 'vllm'\)"),
        ({"kv_blocks": 40}, r"kv_blocks=40 with scheduler='own': the loop's own schedule never preempts"),
        ({"scheduler": "vllm", "kv_blocks": 3}, r"kv_blocks=3: expected 0 or a number in \[26, "),
        ({"scheduler": "vllm", "decode_node": True}, r"scheduler='vllm' with decode_node=True"),
        ({"scheduler": "vllm", "tp": 2, "lmhead_tp": True}, r"scheduler='vllm' with tp=2"),
    ],
)
def test_a_scheduler_a_run_cannot_have_is_refused_by_name(fields, said):
    with pytest.raises(ValueError, match=said):
        Scenario(**fields)


def test_kv_blocks_are_the_caches_and_a_replay_file_without_them_loads():
    scenario = Scenario(scheduler="vllm", kv_blocks=30)
    assert scenario.num_blocks == 30
    saved = scenario.to_json()
    assert Scenario.from_dict(json.loads(saved)) == scenario
    old = {k: v for k, v in dataclasses.asdict(Scenario()).items() if k not in ("scheduler", "kv_blocks")}
    assert Scenario.from_dict(old) == Scenario()
