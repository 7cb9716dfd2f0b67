"""Breaks of vllm-ascend caught on the steps vLLM's own scheduler makes (``Scenario.scheduler = "vllm"``).

The gate runs every implementation on them (``test_propose_loop.py``'s ``SCHEDULED_BY_VLLM``: vLLM's
``Scheduler`` of the env's vLLM deciding the chunks, the drafts verified, the KV blocks, preemption; and
``test_async_scheduling.py``'s, its ``AsyncScheduler`` scheduling each step before the last one's output);
here a broken vllm-ascend fails those runs, and a correct one written otherwise passes them.
"""

from __future__ import annotations

import dataclasses

import pytest

from devices.sim.streams import StreamOrderError
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import UnservableStep
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_propose_loop import SCHEDULED_BY_VLLM

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
    ``AsyncScheduler`` clears the placeholders of a request it does not schedule). The run stops there, naming it (``UnservableStep``);
    the day the env's vLLM clears them this fails: drop the pin, and the drawn runs go on past that step."""
    with pytest.raises(UnservableStep, match=r"^r0: vLLM's AsyncScheduler scheduled 1 placeholder drafts for a"):
        run_scenario(AT_MAX_MODEL_LEN, device, impl)
