"""Breaks of vllm-ascend caught on the steps vLLM's own scheduler makes (``Scenario.scheduler = "vllm"``).

The gate runs every implementation on them (``test_vllm_schedules.py``'s ``SCHEDULED_BY_VLLM``: vLLM's
``Scheduler`` of the env's vLLM deciding the chunks, the drafts verified, the KV blocks, preemption; and
``test_async_scheduling.py``'s, its ``AsyncScheduler`` scheduling each step before the last one's output);
here a broken vllm-ascend fails those runs, and a correct one written otherwise passes them.
"""

from __future__ import annotations

import dataclasses

import pytest

from devices.sim.streams import StreamOrderError
from sim.impls.kit import vllm_schedule
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import SchedulerDefect
from tests.checks.modes import USES_VLLM_SCHEDULER
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_vllm_schedules import PREFIX_CACHED, SCHEDULED_BY_VLLM

pytestmark = USES_VLLM_SCHEDULER  # each runs vLLM's own schedule: a vLLM whose schedule stops a run lacks it

ASYNCHRONOUSLY = dataclasses.replace(SCHEDULED_BY_VLLM, async_scheduling=True)
SAMPLED = dataclasses.replace(ASYNCHRONOUSLY, runner_samples=True)  # the runner's rejection sampler too
SCHEDULES = {"sync": SCHEDULED_BY_VLLM, "async": ASYNCHRONOUSLY}


@pytest.mark.parametrize(
    ("variant", "what", "scenario"),
    [
        *(pytest.param("runner-positions-off-by-one", "positions", s, id=i) for i, s in SCHEDULES.items()),
        *(pytest.param("sample-row-off-by-one", "input_ids", s, id=i) for i, s in SCHEDULES.items()),
        # under asynchronous scheduling the runner hands no host lengths this break could misread
        pytest.param("computed-as-seq-lens", "seq_lens", SCHEDULED_BY_VLLM, id="sync"),
        # asynchronous scheduling's own: what the runner hands the step vLLM scheduled ahead
        pytest.param("runner-counts-of-the-same-row", "corrected seq_len", ASYNCHRONOUSLY, id="async"),
        pytest.param("runner-placeholders-reach-the-model", "input ids", ASYNCHRONOUSLY, id="async"),
        pytest.param("runner-new-rows-corrected-as-the-first", "new request", ASYNCHRONOUSLY, id="async"),
        # and the runner's own sampling: its booking, its rejection sampler, its asynchronous output's copy
        pytest.param("runner-books-a-token-short", "input batch holds", SAMPLED, id="async-sampled"),
        pytest.param("greedy-keeps-the-first-mismatch", "valid sampled tokens", SAMPLED, id="async-sampled"),
        pytest.param("runner-async-output-events-left-placeholders", "valid sampled", SAMPLED, id="async-sampled"),
    ],
)
def test_a_broken_vllm_ascend_fails_on_the_steps_vllms_scheduler_makes(
    monkeypatch, device, impl, variant, what, scenario
):
    """The runner's positions one off, the first pass sampling the row after, the steps' lengths taken for
    the computed tokens; asynchronously, the lengths corrected by another row's count, the scheduler's
    placeholders handed to the model, a new request corrected as the first row; with the runner sampling,
    a token booked short, the greedy rejection keeping the first mismatch, the output's copy read before
    its event (``broken_gate.VARIANTS``): each fails the run, at the value it breaks."""
    broken_gate.apply(variant, monkeypatch)
    report = run_scenario(scenario, device, impl)
    assert not report.ok and any(what in m.what for m in report.mismatches), report.mismatches[:3]


def test_a_count_copy_waiting_on_its_own_stream_fails_the_asynchronous_run_by_name(monkeypatch, device, impl):
    """vllm-ascend#9456 on the steps vLLM's ``AsyncScheduler`` makes: the simulator's streams name the copy."""
    broken_gate.apply("runner-count-copy-waits-on-its-own-stream", monkeypatch)
    with pytest.raises(StreamOrderError, match=r"last written on the default stream"):
        run_scenario(ASYNCHRONOUSLY, device, impl)


@pytest.mark.parametrize("control", ["runner-count-copy-on-the-current-stream", "runner-correction-per-request"])
def test_a_correct_runner_written_otherwise_passes_the_asynchronous_run(monkeypatch, device, impl, control):
    """The controls: the count copy on the stream that computed the counts, the correction as a loop over
    the next step's rows."""
    broken_gate.apply(control, monkeypatch)
    report = run_scenario(ASYNCHRONOUSLY, device, impl)
    assert report.ok, report.mismatches[:3]


# Two requests running into max_model_len (64) with three drafts a step, asynchronously scheduled
AT_MAX_MODEL_LEN = Scenario(
    seed=58,
    num_spec_tokens=3,
    max_model_len=64,
    token_budget=10,
    max_num_reqs=4,
    max_iterations=60,
    requests=(RequestSpec(0, 35, 28), RequestSpec(0, 35, 13)),
    async_scheduling=True,
    scheduler="vllm",
)


def test_vllms_async_scheduler_hands_placeholders_past_their_step_at_max_model_len(device, impl):
    """vLLM's own, pinned: its ``AsyncScheduler`` skips a request whose length counted ahead reached
    ``max_model_len - 1``, and once the step in flight's rejections bring it back, schedules it with the
    placeholders (-1) it set two steps before; the runner keeps the drafts for the next step only, so it
    would hand the model -1 as tokens, which an NPU's embedding gather faults on (vllm-ascend #10305 saw it
    on a decode node; vLLM #46899 reports the placeholders outliving their step, and vLLM's later
    ``AsyncScheduler`` clears the placeholders of a request it does not schedule). The run stops there, naming it (``SchedulerDefect``);
    the day the env's vLLM clears them this fails: drop the pin, and the drawn runs go on past that step."""
    with pytest.raises(SchedulerDefect, match=r"^r0: vLLM's AsyncScheduler scheduled 1 placeholder drafts for a"):
        run_scenario(AT_MAX_MODEL_LEN, device, impl)


def test_a_prefix_cache_hit_of_the_last_matched_block_is_named(monkeypatch, device, impl):
    """What vLLM's prefix cache hands an MTP drafter is checked: with EAGLE's drop of the last matched block
    turned off, a request starts one block further, where the draft layer's KV of its last cached position
    was written from another request's next token; the run stops there naming it (without the check, its
    drafts differ from the reference's, seen when the check was written)."""
    made = vllm_schedule.VllmSchedule.__init__

    def without_the_eagle_drop(self, scenario):
        made(self, scenario)
        manager = self.scheduler.kv_cache_manager
        manager.use_eagle = False
        for group in manager.coordinator.single_type_managers:
            group.use_eagle = False
        if hasattr(manager.coordinator, "eagle_group_ids"):
            manager.coordinator.eagle_group_ids = set()

    monkeypatch.setattr(vllm_schedule.VllmSchedule, "__init__", without_the_eagle_drop)
    with pytest.raises(SchedulerDefect, match=r"KV at position 19 was written from the next token \d+, where"):
        run_scenario(PREFIX_CACHED, device, impl)


# Prompts [a], [a, b], [a, b, c] in blocks of one token: the first request caches block [a] with its draft
# KV written from its own next token; the second computes [a, b] anew (EAGLE's drop leaves it no hit) and
# caches [b] under [a]; the third matches [a] -> [b], keeps [a] after the drop, and gets the first's [a]
CHAIN_OF_WRITERS = Scenario(
    num_spec_tokens=1,
    block_size=1,
    max_model_len=12,
    token_budget=2,
    max_num_reqs=1,
    padded=False,
    accept="greedy",
    vocab_size=32,
    requests=(RequestSpec(0, 1, 1), RequestSpec(0, 2, 1), RequestSpec(0, 3, 1)),
    scheduler="vllm",
    prefix_caching=True,
    shared_prefix=3,
)


def test_vllms_prefix_cache_hands_draft_kv_of_another_continuation(device, impl):
    """vLLM's own, pinned: its prefix cache maps each block's hash to the first request that cached it, so a
    chain matched through blocks of several writers can start with a block whose last position's draft KV
    was written from another continuation than the hitting request's; the drop of the last matched block
    for an EAGLE/MTP drafter covers a chain of one writer only. The run stops there, naming it (vLLM
    0.23.0 and 0.27.1; a production block of 128 tokens makes it one position's KV among many, an
    acceptance loss, not a crash). vLLM 0.33 hashes each block with the tokens after it that such a drafter
    reads (``num_hash_lookahead_tokens``), and the same run passes there: the day the env's vLLM does, this
    fails: drop the pin."""
    with pytest.raises(SchedulerDefect, match=r"^r2: vLLM's prefix cache hands it block \d+ \(positions 0-0\)"):
        run_scenario(CHAIN_OF_WRITERS, device, impl)


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["", "prefix-caching"])
def test_a_last_step_sampling_past_max_tokens_is_not_taken_for_a_preemption(device, impl, prefix_caching):
    """vLLM trims a request's sampled tokens to its ``max_tokens`` in the list it is handed: the loop hands it
    a copy and counts the in-flight step's rejected drafts from its own, so the step vLLM scheduled after
    that one (asynchronously, before it knew the request done) is not taken for a preemption."""
    scenario = Scenario(
        num_spec_tokens=2,
        block_size=1,
        max_model_len=12,
        token_budget=3,
        max_num_reqs=1,
        accept="all",
        vocab_size=32,
        requests=(RequestSpec(0, 1, 3),),
        async_scheduling=True,
        scheduler="vllm",
        prefix_caching=prefix_caching,
    )
    report = run_scenario(scenario, device, impl)
    assert report.ok and report.scheduler_events["ran after finishing"], report.scheduler_events
    assert not report.scheduler_events["preempted"], report.scheduler_events
