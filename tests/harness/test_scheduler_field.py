"""A scenario's scheduler (``Scenario.scheduler``, ``kv_blocks``, ``prefix_caching``, ``shared_prefix``): what it
takes and what it refuses, by name."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        (
            {"scheduler": "fifo"},
            r"scheduler='fifo': expected one of \('own', 'vllm', 'balance', 'recompute', 'dynamic_batch', "
            r"'short_request_first', 'batch_job_aware'\)",
        ),
        ({"kv_blocks": 40}, r"kv_blocks=40 with scheduler='own': the loop's own schedule never preempts"),
        ({"scheduler": "vllm", "kv_blocks": 3}, r"kv_blocks=3: expected 0 or a number in \[26, "),
        ({"scheduler": "balance", "decode_node": True}, r"scheduler='balance' with decode_node=True: a decode node"),
        ({"scheduler": "recompute"}, r"scheduler='recompute' without decode_node=True: vllm-ascend's recompute"),
        (
            {"scheduler": "dynamic_batch", "async_scheduling": True},
            r"scheduler='dynamic_batch' with async_scheduling or decode_node: vllm-ascend's SchedulerDynamicBatch is",
        ),
        (
            {"scheduler": "dynamic_batch", "decode_node": True},
            r"scheduler='dynamic_batch' with async_scheduling or decode_node: vllm-ascend's SchedulerDynamicBatch is",
        ),
        (
            {"scheduler": "short_request_first", "decode_node": True},
            r"scheduler='short_request_first' with decode_node=True: vllm-ascend refuses ShortRequestFirst on a",
        ),
        (
            {"scheduler": "vllm", "decode_node": True, "prefix_caching": True},
            r"prefix_caching=True with decode_node=True: a decode node's prompts come through its KV connector",
        ),
        ({"scheduler": "vllm", "tp": 2, "lmhead_tp": True}, r"scheduler='vllm' with tp=2"),
        ({"scheduler": "balance", "tp": 2, "lmhead_tp": True}, r"scheduler='balance' with tp=2"),
        ({"scheduler": "balance", "kv_blocks": 3}, r"kv_blocks=3: expected 0 or a number in \[26, "),
        ({"prefix_caching": True}, r"prefix_caching=True with scheduler='own': prefix caching is vLLM's"),
        ({"shared_prefix": -1}, r"shared_prefix=-1: a prefix has no fewer than 0 tokens"),
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


def test_every_prompt_begins_with_the_shared_prefix_and_none_changes_nothing():
    """``shared_prefix``: the first tokens of every prompt (up to its length) are one drawn prefix; a
    scenario without one draws its prompts as it did before the field."""
    requests = (RequestSpec(0, 9, 2), RequestSpec(0, 4, 2), RequestSpec(0, 12, 2))
    plain = Scenario(requests=requests)
    shared = dataclasses.replace(plain, shared_prefix=6)

    def prompts(scenario):
        sim = ServingSim(scenario, build_models(scenario, torch.device("cpu"))[1])
        sim.step(0)
        return [req.tokens[: req.prompt_len] for req in sim.running]

    before, after = prompts(plain), prompts(shared)
    assert after[0][:6] == after[2][:6] and after[1] == after[0][:4]
    assert [p[6:] for p in after] == [p[6:] for p in before]  # past the prefix, the prompts drawn before


@pytest.mark.parametrize("name", ["balance", "recompute", "dynamic_batch", "short_request_first", "batch_job_aware"])
def test_vllm_ascends_own_scheduler_without_vllm_ascend_is_refused_naming_what_it_needs(monkeypatch, name):
    """vllm-ascend's own schedulers are the installed vllm-ascend's: an env without it says so by name."""
    from sim.impls.kit import vllm_schedule

    monkeypatch.setattr(vllm_schedule, "_under_vllm_ascend", lambda: False)
    with pytest.raises(ValueError, match=rf"^scheduler='{name}': vllm-ascend's own scheduler needs vllm-ascend"):
        vllm_schedule._ascend(name)
    assert vllm_schedule._ascend("vllm") is None  # vLLM's own, as vLLM ships it


def test_an_order_whose_queue_the_built_scheduler_lacks_is_refused_by_name():
    """A waiting-queue order that the checkout's configuration no longer selects would run vLLM's order unseen:
    the built scheduler's queue is checked, and one of another class named."""
    from sim.impls.kit.ascend import schedulers

    class Scheduler:
        waiting: list = []

    with pytest.raises(RuntimeError, match=r"^scheduler='short_request_first': Scheduler waits its requests in a list"):
        schedulers.check_built("short_request_first", Scheduler())
    schedulers.check_built("balance", Scheduler())  # no queue of its own
