"""vllm-ascend's own schedulers (``sim.impls.kit.ascend.schedulers``), each a copy of vLLM's schedule of its own, so
the steps they make are the checkout's code as much as the drafter is. Which of them the checkout has, and which it
cannot run whole, is read off their files (``sim.impls.vllm_ascend.scheduler_lacks``); each pin here runs what was
read, and fails where the run does not do it.

Balance scheduling (``Scenario.scheduler = "balance"``), on one rank (its DP hold: ``test_data_parallel.py``): the
preempting run of vLLM's schedule (``SCHEDULED_BY_VLLM``) under greedy verification. Where the checkout's copy gives
a request's first scheduling its lookahead slots (v0.24.0rc on), every call equals the reference and every output is
the target's own; where it does not (0.23.0 and the releases before it:
``balance-scheduler-first-scheduling-without-lookahead``), the run stops at the first such step, naming it.

The dynamic batch of releases up to 0.23.0 (``dynamic_batch``, synchronous): the same run, on its
``SchedulerDynamicBatch``; the same rule in its copy (``dynamic-batch-scheduler-first-scheduling-without-lookahead``)
stops it; later checkouts have none (said).

Main's waiting-queue orders over vLLM's schedule (``short_request_first``, ``batch_job_aware``; 0.23.0 has neither,
said): the same preempting run, sync and async, every call the reference's and every output the target's own,
some request admitted ahead of one that arrived before it.

A decode node's recompute scheduler (``recompute``): ``DECODE_NODE``, each prompt's KV loaded through vLLM's KV
connector, each request's first step its last prompt token with placeholder drafts, and on 13 blocks requests
sent back to a prefill node where vLLM's would preempt them here."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from sim.impls.features import Feature
from sim.impls.kit.ascend import schedulers
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import SchedulerDefect
from tests.checks.e2e_checks import check_greedy_outputs, check_implementation
from tests.checks.modes import USES_ASYNC_SCHEDULING, USES_VLLM_SCHEDULER
from tests.properties.test_propose_loop import _check
from tests.properties.test_vllm_schedules import DECODE_NODE, GREEDY, SCHEDULED
from tests.strategies.scenarios import scheduled_by_vllm

# each schedules through vLLM's scheduler and KV cache manager: under a vLLM whose own schedule stops a run (before
# 0.23, tests/impls/vllm_ascend/test_vllms_scheduler.py), refused, said
pytestmark = USES_VLLM_SCHEDULER
BALANCED = dataclasses.replace(GREEDY, scheduler="balance")
# the known defects of vllm-ascend's own schedulers that stop a run at a step (SchedulerDefect): a drawn run is
# compared up to it
STOPS_A_RUN = (
    "balance-scheduler-first-scheduling-without-lookahead",
    "dynamic-batch-scheduler-first-scheduling-without-lookahead",
)


@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
def test_balance_scheduling_serves_the_drafter_or_stops_at_its_known_defect(device, impl, asynchronous, request):
    """Every call equals the reference, every output is the target's own, and the case still preempts; where
    the checkout's copy gives a first scheduling no lookahead slots, the run stops at that step instead."""
    scenario = dataclasses.replace(BALANCED, async_scheduling=asynchronous)
    _serves_or_stops_at_a_first_scheduling(scenario, Feature.BALANCE_SCHEDULING, device, impl, request)


def test_the_dynamic_batch_serves_the_drafter_or_stops_at_its_known_defect(device, impl, request):
    """The same as balance scheduling's, on the dynamic batch's ``SchedulerDynamicBatch`` (synchronous: a
    deployment builds no other); a checkout without it (main) says so and runs nothing."""
    scenario = dataclasses.replace(GREEDY, scheduler="dynamic_batch")
    _serves_or_stops_at_a_first_scheduling(scenario, Feature.DYNAMIC_BATCH, device, impl, request)


def _serves_or_stops_at_a_first_scheduling(scenario, feature: Feature, device, impl, request) -> None:
    """``scenario`` on vllm-ascend's scheduler of ``feature``: the whole run where the checkout has it whole;
    where its lack is a copy of vLLM's schedule giving a first scheduling no lookahead slots, the run stopping at
    that step; another lack (no such scheduler) said."""
    known = impl.lacking({feature}, device.name)
    if known is None:
        report = check_implementation(impl, scenario, device, request.node.name)
        assert report.scheduler_events["preempted"] > 0, f"the case no longer preempts: {report.scheduler_events}"
        check_greedy_outputs(scenario, report)
        return
    if not _stops_a_run(known):
        pytest.skip(known)
    said = "its first scheduling from the waiting queue got no lookahead slots"
    _stops_at(known, SchedulerDefect, said, scenario, device, impl)


ORDERS = {"short_request_first": Feature.SHORT_REQUEST_FIRST, "batch_job_aware": Feature.BATCH_JOB_AWARE}
# Long and short prompts waiting at once for two rows on 13 blocks: an order admits some ahead of earlier ones
# (ShortRequestFirst the short prompts, of up to 8 tokens; the batch-job-aware queue by prompt length after its
# first three), and vLLM preempts
QUEUED = dataclasses.replace(
    GREEDY,
    max_num_reqs=2,
    requests=(
        RequestSpec(0, 14, 12),
        RequestSpec(0, 11, 12),
        RequestSpec(0, 12, 10),
        RequestSpec(0, 5, 12),
        RequestSpec(1, 6, 10),
        RequestSpec(1, 20, 8),
    ),
)


@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
@pytest.mark.parametrize("name", sorted(ORDERS))
def test_mains_waiting_queue_orders_serve_the_drafter(device, impl, name, asynchronous, request):
    """Every call equals the reference and every output is the target's own, on vLLM's schedule over the order's
    waiting queue; the case still preempts, and the order admitted a request ahead of an earlier one (vLLM's
    first come, first served never does here)."""
    known = impl.lacking({ORDERS[name]}, device.name)
    if known is not None:
        pytest.skip(known)
    scenario = dataclasses.replace(QUEUED, scheduler=name, async_scheduling=asynchronous)
    report = check_implementation(impl, scenario, device, request.node.name)
    check_greedy_outputs(scenario, report)
    events = report.scheduler_events
    assert events["preempted"] > 0 and events["admitted ahead of an earlier request"] > 0, events


@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
def test_a_decode_nodes_recompute_scheduler_serves_the_drafter_or_crashes_at_its_known_defect(
    device, impl, asynchronous, request
):
    """Every call equals the reference and every output (a request sent back: its tokens so far) is the
    target's own; every prompt was received, first steps carried placeholder drafts (every one's where the copy
    fills a KV consumer's drafts itself, 0.23.0 and v0.24.0rc; from v0.25.1rc, copied from vLLM 0.25, only those
    admitted beside running decodes), and some requests were sent back. Where the
    checkout's copy reads a request field its vLLM never sets (main on vLLM 0.27.1:
    ``recompute-scheduler-reads-a-request-field-its-vllm-lacks``), the run raises there, and the day it no
    longer does this fails."""
    scenario = dataclasses.replace(DECODE_NODE, scheduler="recompute", async_scheduling=asynchronous)
    known = impl.lacking({Feature.RECOMPUTE_SCHEDULER}, device.name)
    if known is not None:
        said = "'Request' object has no attribute 'async_tokens_to_discard'"
        _stops_at(known, AttributeError, said, scenario, device, impl)
        return
    report = check_implementation(impl, scenario, device, request.node.name)
    check_greedy_outputs(scenario, report)
    events, n = report.scheduler_events, len(scenario.requests)
    assert events["prompts received"] == n and events["last prompt tokens padded with placeholders"] > 0, events
    assert events["sent back to a prefill node"] > 0, events


# One one-token prompt on a decode node: after its load vLLM computes that token again, so the request is scheduled
# from the waiting queue with nothing computed, and a copy that gives such a first scheduling no lookahead slots
# leaves its drafts' KV past its blocks (0.23.0's RecomputeScheduler, vLLM's rule before #43733; main's copies
# vLLM's later rule)
ONE_TOKEN_PROMPT = Scenario(
    num_spec_tokens=2,
    block_size=1,
    max_model_len=12,
    token_budget=3,
    max_num_reqs=1,
    accept="greedy",
    vocab_size=32,
    decode_node=True,
    scheduler="recompute",
    requests=(RequestSpec(0, 1, 1),),
)


def test_a_one_token_prompt_on_the_recompute_scheduler_serves_the_drafter_or_stops_at_its_known_defect(
    device, impl, request
):
    """Where the checkout's copy keeps the first-scheduling rule (``recompute-scheduler-first-scheduling-without-
    lookahead``: 0.23.0, v0.24.0rc), the run stops at the request's step, naming the rule, and the day it goes through
    this fails; where it does not (v0.25.1rc on), the run is compared whole."""
    crash = impl.lacking({Feature.RECOMPUTE_SCHEDULER}, device.name)
    if crash is not None:
        pytest.skip(f"the run raises first (pinned above): {crash}")
    if not schedulers.first_scheduling_without_lookahead("recompute"):
        report = check_implementation(impl, ONE_TOKEN_PROMPT, device, request.node.name)
        check_greedy_outputs(ONE_TOKEN_PROMPT, report)
        return
    known = "recompute-scheduler-first-scheduling-without-lookahead (docs/DIVERGENCES-vllm-ascend.md)"
    said = "its first scheduling from the waiting queue got no lookahead slots"
    _stops_at(known, SchedulerDefect, said, ONE_TOKEN_PROMPT, device, impl)


OWN = {
    "balance": Feature.BALANCE_SCHEDULING,
    "recompute": Feature.RECOMPUTE_SCHEDULER,
    "dynamic_batch": Feature.DYNAMIC_BATCH,
    **ORDERS,
}


@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
@SCHEDULED
@given(scenario=scheduled_by_vllm(asynchronous=True), name=st.sampled_from(sorted(OWN)))
def test_vllm_ascends_own_schedulers_schedules_match_reference(device, impl, asynchronous, scenario, name, request):
    """Drawn requests on vllm-ascend's own schedulers, each the checkout has (one it lacks: its pin above):
    balance scheduling on one rank, the recompute scheduler on a decode node, the dynamic batch synchronously,
    main's waiting-queue orders.
    A run reaching a defect of the scheduler (``SchedulerDefect``: one of ``STOPS_A_RUN``, the pins', or
    another) is compared up to that step."""
    known = impl.lacking({OWN[name]}, device.name)
    assume(known is None or _stops_a_run(known))
    assume(name != "dynamic_batch" or not asynchronous)
    node = name == "recompute"  # a decode node's cache holds every request (scenarios.scheduled_by_vllm says why)
    scenario = dataclasses.replace(
        scenario,
        scheduler=name,
        decode_node=node,
        kv_blocks=0 if node else scenario.kv_blocks,
        prefix_caching=scenario.prefix_caching and not node,
        async_scheduling=asynchronous,
    )
    try:
        _check(device, impl, scenario, True, "eager", request.node.name)
    except SchedulerDefect:
        event("stopped at a defect of the scheduler")


def _stops_a_run(known: str) -> bool:
    """Whether the lack ``known`` is a known defect of a scheduler that stops a run at a step."""
    return any(defect in known for defect in STOPS_A_RUN)


def _stops_at(known: str, error: type, said: str, scenario, device, impl) -> None:
    """The run stops at the known defect ``known``, an ``error`` saying ``said``; the day it does not, a failure
    saying that the scheduler's file no longer does what it is read to do."""
    try:
        run_scenario(scenario, device, impl)
    except error as found:
        assert said in str(found), found
        return
    pytest.fail(
        f"the run went through: {known} is fixed otherwise than in the text it is read by; mend that reading"
        " (sim/impls/vllm_ascend/scheduler_lacks.py) or the entry"
    )
