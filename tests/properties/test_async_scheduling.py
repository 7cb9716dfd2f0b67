"""Asynchronous scheduling on whole serving runs equals the from-scratch reference.

Under asynchronous scheduling the model runner copies each step's valid sampled-token counts to the
host on a side stream and hands the next step the tokens it continues from; that step corrects the
lengths the scheduler counted ahead by the copied counts (``Scenario.async_scheduling``). Every call's
drafts and metadata are compared as in a synchronous run, and what the runner hands on besides
(``sim.oracle.next_step``), on the simulator's streams, where a copy reading another stream's unwaited
write is named and a host read before the copy's event lands reads poison (``devices.sim.streams``).
Under every implementation whose runner schedules asynchronously (the ``uses`` mark: vllm-ascend's), for
each drafting method it has: the runner hands an EAGLE-3 drafter the target's three layers, and an EAGLE
drafter takes its method's branches, step after step as for MTP.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given

from sim.serving.run import run_scenario
from sim.serving.simulator import SchedulerDefect
from tests.checks.e2e_checks import check_greedy_outputs, check_implementation
from tests.checks.example_budget import share
from tests.checks.modes import (
    MODES,
    USES_ASYNC_SCHEDULING,
    USES_EAGLE,
    USES_EAGLE3,
    USES_RUNNER_SAMPLES,
    USES_VLLM_SCHEDULER,
)
from tests.properties.test_mrope_eagle3 import SMALL
from tests.properties.test_vllm_schedules import NEEDS_VLLM, SCHEDULED, SCHEDULED_BY_VLLM
from tests.strategies.scenarios import scenarios, scheduled_by_vllm

pytestmark = [pytest.mark.order(2), USES_ASYNC_SCHEDULING]  # whole serving runs, after the single-call properties

DRAWN = share(12 * len(MODES), at_least=3)
ASYNC = dataclasses.replace(SMALL, async_scheduling=True)
METHODS = [
    pytest.param("mtp"),
    pytest.param("eagle", marks=USES_EAGLE),
    pytest.param("eagle3", marks=USES_EAGLE3),
]
DRAWN_METHODS = [m for m in METHODS if m.values[0] != "eagle"]  # EAGLE-1's runner hand-off is MTP's


@pytest.mark.order(0)  # one fixed serving run per mode and method: beside the other fixed runs
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", MODES)
def test_a_case_every_broken_variant_fails_matches_reference(device, impl, mode, method):
    """``SMALL`` scheduled asynchronously, run early so that a broken count copy or correction fails
    within seconds; its drafts are the synchronous run's, call for call."""
    scenario = dataclasses.replace(ASYNC, graph_mode=mode, method=method)
    check_implementation(impl, scenario, device, f"small-async-{mode}-{method}")
    synchronous = run_scenario(dataclasses.replace(scenario, async_scheduling=False), device, impl, check=False)
    asynchronous = run_scenario(scenario, device, impl, check=False)
    assert asynchronous.drafts == synchronous.drafts


@pytest.mark.parametrize("method", DRAWN_METHODS)
@pytest.mark.parametrize("mode", MODES)
@DRAWN
@given(scenario=scenarios())
def test_async_scheduling_matches_reference(device, impl, mode, method, scenario, request):
    """Drafts (margin-aware), every call's metadata, and what the runner hands each next step."""
    scenario = dataclasses.replace(scenario, padded=True, graph_mode=mode, async_scheduling=True, method=method)
    check_implementation(impl, scenario, device, request.node.name)


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize(
    "samples", [False, pytest.param(True, marks=USES_RUNNER_SAMPLES)], ids=["loop-verifies", "runner-samples"]
)
@pytest.mark.parametrize("mode", MODES)
def test_a_serving_run_vllms_async_scheduler_schedules_matches_reference(device, impl, mode, samples, request):
    """``SCHEDULED_BY_VLLM`` as vLLM's ``AsyncScheduler`` schedules it, eagerly and in each graph mode: each
    step scheduled before the last one's output, its drafts counted as accepted, a request preempted while
    its step is in flight, a request run once more after the step that finished it; and so with the runner
    sampling the target's tokens itself (its rejection sampler, its asynchronous output), as a deployment
    serves MTP."""
    sizes = None if mode == "eager" else (2, 8)
    scenario = dataclasses.replace(
        SCHEDULED_BY_VLLM, graph_mode=mode, capture_sizes=sizes, async_scheduling=True, runner_samples=samples
    )
    report = check_implementation(impl, scenario, device, request.node.name)
    events = report.scheduler_events
    named = ("preempted", "counted ahead", "ran after finishing")
    assert all(events[e] for e in named), f"the case no longer tests what it names: {events}"


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize("mode", MODES)
@SCHEDULED
@given(scenario=scheduled_by_vllm(asynchronous=True))
def test_vllms_async_scheduler_schedules_match_reference(device, impl, mode, scenario, request):
    """Drawn requests on a drawn KV cache, as vLLM's ``AsyncScheduler`` schedules them, eagerly and in each
    graph mode: drafts, every call's metadata, and what the runner hands each next step. A run reaching a
    step vLLM's scheduler's defect made (placeholders outliving their step, near ``max_model_len``:
    pinned in ``tests/impls/vllm_ascend/test_scheduled_by_vllm.py``) is compared up to that step."""
    scenario = dataclasses.replace(scenario, graph_mode=mode)
    try:
        report = check_implementation(impl, scenario, device, request.node.name)
    except SchedulerDefect:
        event("stopped at a defect of vLLM's scheduler")
        return
    if scenario.accept == "greedy" and report.outputs:  # and its outputs, the target's own greedy decoding
        check_greedy_outputs(scenario, report)
