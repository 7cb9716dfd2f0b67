"""Serving runs on the steps vLLM's own schedulers make (``Scenario.scheduler = "vllm"``, in the adapter envs):
its ``Scheduler`` (chunks, the drafts it verifies, its blocks, preemption), its ``AsyncScheduler`` (each step
scheduled before the last one's output), its prefix cache, and the other drafts a deployment serves on them;
under greedy verification every request's output is the target's own greedy decoding."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
from hypothesis import event, given

from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import SchedulerDefect
from tests.checks.e2e_checks import check_greedy_outputs, check_implementation
from tests.checks.example_budget import share
from tests.checks.modes import (
    MODES,
    PADDING,
    USES_ASYNC_SCHEDULING,
    USES_DRAFT_ATTN_GROUPS,
    USES_DRAFT_MODEL,
    USES_EAGLE3,
    USES_KERNEL_BLOCKS,
    USES_MLA_DRAFT,
    USES_VLLM_SCHEDULER,
)
from tests.properties.test_propose_loop import _check
from tests.strategies.scenarios import scheduled_by_vllm

pytestmark = pytest.mark.order(2)  # whole serving runs: after the single-call properties

SCHEDULED = share(16, at_least=4)  # likewise (vLLM's steps): at least 4 per mode and padding

# Five requests on the steps vLLM's own scheduler makes (the env's vLLM, sim.impls.kit.vllm_schedule): its chunks,
# the drafts it verifies, its KV cache manager's blocks, handed out in order, and a cache of 13 blocks (one
# request at full length, the null block and three more) that it preempts requests from, five times in 24
# steps: each comes back as a prefill of every token it holds, into other blocks.
SCHEDULED_BY_VLLM = Scenario(
    num_spec_tokens=3,
    max_model_len=32,
    token_budget=16,
    max_num_reqs=4,
    max_iterations=40,
    scheduler="vllm",
    kv_blocks=13,
    requests=(
        RequestSpec(0, 9, 16),
        RequestSpec(0, 5, 20),
        RequestSpec(1, 14, 14),
        RequestSpec(2, 6, 20),
        RequestSpec(4, 11, 12),
    ),
)
NEEDS_VLLM = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="scheduler='vllm' runs the env's vLLM: the adapter envs (tox -e vllm, vllm_ascend, vllm_ascend_0_13) run it",
)


@NEEDS_VLLM  # a whole serving run (the module's order 2): the multi-rank paths' first cases come before it
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize("mode", MODES)
def test_a_serving_run_vllms_scheduler_schedules_matches_reference(device, impl, mode, request):
    """``SCHEDULED_BY_VLLM`` eagerly and in each graph mode (capturing at two sizes) equals the reference,
    the preempted requests' calls included."""
    sizes = None if mode == "eager" else (2, 8)
    scenario = dataclasses.replace(SCHEDULED_BY_VLLM, graph_mode=mode, capture_sizes=sizes)
    report = check_implementation(impl, scenario, device, request.node.name)
    assert report.scheduler_events["preempted"] > 0, (
        "vLLM's scheduler preempted no request: the case no longer tests preemption"
    )


GREEDY = dataclasses.replace(SCHEDULED_BY_VLLM, accept="greedy")
SCHEDULERS = [
    pytest.param(dataclasses.replace(GREEDY, scheduler="own", kv_blocks=0), id="own"),
    pytest.param(GREEDY, id="vllm", marks=[NEEDS_VLLM, USES_VLLM_SCHEDULER]),
    pytest.param(
        dataclasses.replace(GREEDY, async_scheduling=True),
        id="vllm-async",
        marks=[NEEDS_VLLM, USES_VLLM_SCHEDULER, USES_ASYNC_SCHEDULING],
    ),
]


@pytest.mark.parametrize("scenario", SCHEDULERS)
def test_greedy_outputs_are_the_targets_own(device, impl, scenario, request):
    """Spec decoding on and off give the same output (vLLM #10621): under greedy verification every
    request's tokens are the target's own greedy decoding of its prompt, whoever scheduled the steps (the
    loop, vLLM's ``Scheduler`` preempting, its ``AsyncScheduler`` counting ahead), and every call matches
    the reference."""
    check_greedy_outputs(scenario, check_implementation(impl, scenario, device, request.node.name))


# One-token prompts arriving beside running decodes: vLLM 0.27 on schedules each such last prompt token as a
# uniform decode, with K placeholder drafts (-1) that the runner clamps to 0 before the model and its rejection
# sampler rejects (three times here)
LAST_TOKENS_PADDED = Scenario(
    num_spec_tokens=2,
    block_size=1,
    max_model_len=12,
    token_budget=6,
    max_num_reqs=2,
    accept="greedy",
    vocab_size=32,
    max_iterations=30,
    scheduler="vllm",
    requests=(
        RequestSpec(0, 3, 4),
        RequestSpec(0, 1, 3),
        RequestSpec(1, 1, 2),
        RequestSpec(2, 1, 3),
        RequestSpec(3, 1, 2),
        RequestSpec(4, 2, 2),
    ),
)


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
def test_a_last_prompt_token_padded_with_placeholder_drafts_matches_reference(device, impl, request):
    """``LAST_TOKENS_PADDED``: a request whose prefill is its last prompt token, scheduled with placeholder
    drafts beside running decodes, drafts from its prompt alone (its placeholder rows rejected), and its
    outputs are the target's own. Where the env's vLLM pads (0.27 on), the case is seen padded."""
    from sim.impls.kit.vllm_schedule import pads_last_prompt_tokens

    report = check_implementation(impl, LAST_TOKENS_PADDED, device, request.node.name)
    check_greedy_outputs(LAST_TOKENS_PADDED, report)
    padded = report.scheduler_events["last prompt tokens padded with placeholders"]
    assert (padded > 0) == pads_last_prompt_tokens(), f"{padded} last prompt tokens padded: {report.scheduler_events}"


# The decode node of a prefill/decode split on vLLM's scheduler: every prompt's KV loaded from a prefill node
# through the KV connector's scheduler side (sim.impls.kit.remote_prefill), each request held until its load is
# reported, then its last prompt token computed again to sample its first token; on 13 blocks (vLLM 0.23 and
# 0.27 preempt there: a preempted request computes its prompt on the node, the connector asked again)
DECODE_NODE = Scenario(
    num_spec_tokens=3,
    max_model_len=32,
    token_budget=16,
    max_num_reqs=4,
    accept="greedy",
    max_iterations=40,
    decode_node=True,
    scheduler="vllm",
    kv_blocks=13,
    requests=(
        RequestSpec(0, 9, 6),
        RequestSpec(0, 5, 8),
        RequestSpec(1, 14, 5),
        RequestSpec(2, 6, 6),
        RequestSpec(3, 11, 4),
    ),
)


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
def test_a_decode_node_on_vllms_scheduler_matches_reference(device, impl, asynchronous, request):
    """``DECODE_NODE``: each request drafts, from its first step on, from the draft KV the prefill node wrote
    for its prompt (loaded into the blocks vLLM allocated) and its own last prompt token computed again
    (vLLM 0.27 on: padded with placeholder drafts beside running decodes); its outputs are the target's own.
    vLLM 0.23 and 0.27 preempt there (2 and 4 requests in the two orders); 0.33 admits no more than its
    blocks hold."""
    scenario = dataclasses.replace(DECODE_NODE, async_scheduling=asynchronous)
    report = check_implementation(impl, scenario, device, request.node.name)
    check_greedy_outputs(scenario, report)
    assert report.scheduler_events["prompts received"] == len(scenario.requests), report.scheduler_events


# Requests sharing a 20-token prefix (five blocks of 4) on vLLM's prefix cache: three of them start past
# the blocks the first computed (vLLM hands an MTP drafter's requests one block fewer), at other times
PREFIX_CACHED = Scenario(
    num_spec_tokens=3,
    max_model_len=48,
    token_budget=16,
    max_num_reqs=4,
    max_iterations=60,
    accept="greedy",
    scheduler="vllm",
    prefix_caching=True,
    shared_prefix=20,
    requests=(RequestSpec(0, 22, 6), RequestSpec(3, 25, 8), RequestSpec(4, 21, 8), RequestSpec(9, 30, 6)),
)


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
def test_a_serving_run_on_vllms_prefix_cache_matches_reference(device, impl, asynchronous, request):
    """``PREFIX_CACHED``: a request starting past cached blocks drafts from the draft layer's KV another
    request wrote there, and must draft what the reference drafts from its own history; its outputs are the
    target's own greedy decoding."""
    scenario = dataclasses.replace(PREFIX_CACHED, async_scheduling=asynchronous)
    report = check_implementation(impl, scenario, device, request.node.name)
    assert report.scheduler_events["prefix cache hits"] > 0, f"no prefix cache hit: {report.scheduler_events}"
    check_greedy_outputs(scenario, report)


# ``PREFIX_CACHED`` on a hybrid target's layout (Qwen3.5's, whose users serve it with prefix caching and
# async scheduling under KV pressure, vllm-ascend #13863): blocks of 8 tokens split into kernel blocks of 2,
# and the fewest blocks the scenario may have, so vLLM preempts besides its hits
HYBRID_PREFIX_CACHED = dataclasses.replace(PREFIX_CACHED, block_size=8, kernel_block_size=2, kv_blocks=8)


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@USES_KERNEL_BLOCKS
@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
def test_a_hybrid_targets_kernel_blocks_on_vllms_prefix_cache_match_reference(device, impl, asynchronous, request):
    """``HYBRID_PREFIX_CACHED``: the runner's table of kernel blocks under vLLM's prefix cache hits and
    preemption, synchronously and asynchronously; outputs the target's own greedy decoding."""
    scenario = dataclasses.replace(HYBRID_PREFIX_CACHED, async_scheduling=asynchronous)
    report = check_implementation(impl, scenario, device, request.node.name)
    events = report.scheduler_events
    assert events["prefix cache hits"] > 0 and events["preempted"] > 0, f"no hit or preemption: {events}"
    check_greedy_outputs(scenario, report)


# The other drafts a deployment serves, on the same steps: each method and attention a property of its own
# already checks on the loop's schedule, here once on vLLM's, eagerly (one run each, about a second)
OTHER_DRAFTS = [
    pytest.param({"method": "eagle3"}, id="eagle3", marks=USES_EAGLE3),
    pytest.param({"method": "draft_model"}, id="draft_model", marks=USES_DRAFT_MODEL),
    pytest.param({"draft_attn": "mla"}, id="mla", marks=USES_MLA_DRAFT),
    pytest.param({"draft_attn_groups": 2}, id="two-groups", marks=USES_DRAFT_ATTN_GROUPS),
]


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize(
    "asynchronous", [False, pytest.param(True, marks=USES_ASYNC_SCHEDULING)], ids=["sync", "async"]
)
@pytest.mark.parametrize("draft", OTHER_DRAFTS)
def test_a_serving_run_vllms_scheduler_schedules_matches_reference_for_each_draft(
    device, impl, draft, asynchronous, request
):
    """``SCHEDULED_BY_VLLM`` (its preemptions included) with an EAGLE-3 drafter, a draft model, an MLA
    draft and a draft of two attention groups, scheduled by vLLM's ``Scheduler`` and ``AsyncScheduler``."""
    scenario = dataclasses.replace(SCHEDULED_BY_VLLM, async_scheduling=asynchronous, **draft)
    report = check_implementation(impl, scenario, device, request.node.name)
    assert report.scheduler_events["preempted"] > 0, f"the case no longer preempts: {report.scheduler_events}"


@NEEDS_VLLM
@USES_VLLM_SCHEDULER
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", PADDING)
@SCHEDULED
@given(scenario=scheduled_by_vllm())
def test_vllms_scheduler_schedules_match_reference(device, impl, padded, mode, scenario, request):
    """Drawn requests on a drawn KV cache, as vLLM's ``Scheduler`` schedules them (preempting where the
    blocks run out; with its prefix cache or without), eagerly and in each graph mode. A run reaching a
    defect of vLLM's scheduler (its prefix cache handing KV another continuation wrote: pinned in
    ``tests/impls/vllm_ascend/test_scheduled_by_vllm.py``) is compared up to that step."""
    try:
        _check(device, impl, scenario, padded, mode, request.node.name)
    except SchedulerDefect:
        event("stopped at a defect of vLLM's scheduler")
