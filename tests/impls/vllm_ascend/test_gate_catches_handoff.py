"""The gate catches a broken hand-off from vllm-ascend's runner to its drafter.

The drafts come through the runner's own ``propose_draft_token_ids`` (``sim.impls.vllm_ascend.handoff``),
so what it gathers for ``_propose`` is under test: target positions taken off by one by
``_get_positions``, a scheduled-token count one short (the rows an all-prefill batch hands over), or
an attention state of ``PrefillNoCache`` for a batch where not every request is new, fail a serving run (``handoff_breaks``, also ``broken_gate.VARIANTS`` for the whole gate).
"""

from __future__ import annotations

import dataclasses

import pytest

from devices.sim.streams import StreamOrderError
from tests.checks.e2e_checks import check_implementation
from tests.checks.modes import USES_ASYNC_SCHEDULING
from tests.impls.suites import assert_serving_runs_fail
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_propose_loop import TYPICAL


def test_target_positions_off_by_one_fail_the_gate(monkeypatch, device, impl):
    """``_get_positions`` one past: the first pass is handed other positions than the batch's."""
    broken_gate.apply("runner-positions-off-by-one", monkeypatch)
    assert_serving_runs_fail(impl, device, "broken-runner-positions", r"positions")


@pytest.mark.parametrize("mode", ["eager", "full"])
def test_kernel_blocks_of_another_block_fail_by_name(monkeypatch, device, impl, mode):
    """The runner's conversion of a hybrid target's blocks into kernel blocks one off: attention reads a
    request's tokens from another block's kernel blocks, named at the read (``kernel_blocks.check``), in a
    captured graph after its replay."""
    if mode == "full" and not device.supports_graphs:
        pytest.skip(f"device {device.name} cannot capture graphs")
    broken_gate.apply("kernel-blocks-of-the-next-block", monkeypatch)
    sizes = (2, 8) if mode == "full" else None
    hybrid = dataclasses.replace(TYPICAL, block_size=8, kernel_block_size=2, graph_mode=mode, capture_sizes=sizes)
    with pytest.raises(AssertionError, match=r"request \d+: kernel block column 0 holds \d+, not kernel block"):
        check_implementation(impl, hybrid, device, "broken-kernel-blocks-converted")


def test_a_scheduled_token_count_one_short_fails_the_gate(monkeypatch, device, impl):
    """``num_scheduled_tokens`` one short: an all-prefill batch hands ``_propose`` one row too few,
    which either drafts from other rows or (a one-token batch: no row) makes ``_propose`` fail."""
    broken_gate.apply("runner-num-scheduled-tokens-short", monkeypatch)
    match = r"draft|input_ids|positions|expanded size"
    assert_serving_runs_fail(impl, device, "broken-runner-count", match, errors=(AssertionError, RuntimeError))


def test_a_prefill_state_for_a_batch_with_context_fails_by_name(monkeypatch, device, impl):
    """``_build_attn_state`` saying ``PrefillNoCache`` when any request is new: beside a new prompt, the
    requests with context would read none of it at their first pass, and the forward says so."""
    broken_gate.apply("runner-prefill-state-with-any-new-request", monkeypatch)
    assert_serving_runs_fail(impl, device, "broken-runner-attn-state", r"step 1: the attention reads no cached context")


def test_a_decode_nodes_first_step_labelled_new_prompts_fails_by_name(monkeypatch, device, impl):
    """``_build_attn_state`` saying ``PrefillNoCache`` for batches of one-token queries: a decode node's
    first step (transferred prompts, no drafts) is such a batch, and ``TYPICAL`` has none off a decode
    node (only requests left no room for drafts at ``max_model_len`` make one): it passes there, and on
    a decode node the forward names the context it was told not to read."""
    broken_gate.apply("runner-one-token-batches-as-new-prompts", monkeypatch)
    check_implementation(impl, TYPICAL, device, "one-token-batches-off-a-decode-node")
    with pytest.raises(AssertionError, match=r"step 1: the attention reads no cached context"):
        check_implementation(impl, dataclasses.replace(TYPICAL, decode_node=True), device, "broken-decode-node")


def test_auxiliary_layers_in_another_order_fail_the_gate(monkeypatch, device, impl):
    """eagle3: the runner hands the target's auxiliary layers reversed; the draft folds other states
    than the reference's, and draft 1 already differs."""
    broken_gate.apply("runner-aux-layers-reversed", monkeypatch)
    with pytest.raises(AssertionError, match=r"draft 1"):
        check_implementation(impl, dataclasses.replace(TYPICAL, method="eagle3"), device, "broken-aux-layers")


ASYNC = dataclasses.replace(TYPICAL, async_scheduling=True)


@USES_ASYNC_SCHEDULING
def test_a_count_copy_waiting_on_its_own_stream_fails_by_name(monkeypatch, device, impl):
    """vllm-ascend#9456: the copy stream waits on itself, not on the stream that computed the counts; the
    simulator's streams name the copy (on an NPU it reads the counts before they are written)."""
    broken_gate.apply("runner-count-copy-waits-on-its-own-stream", monkeypatch)
    check_implementation(impl, TYPICAL, device, "own-stream-wait-synchronous")  # no copy without async
    with pytest.raises(StreamOrderError, match=r"last written on the default stream"):
        check_implementation(impl, ASYNC, device, "broken-count-copy-stream")


@USES_ASYNC_SCHEDULING
@pytest.mark.parametrize("control", ["runner-count-copy-on-the-current-stream", "runner-correction-per-request"])
def test_a_correct_count_copy_or_correction_written_otherwise_passes(monkeypatch, device, impl, control):
    """The controls: the copy issued and recorded on the stream that computed the counts needs no wait;
    the correction as a loop over the next step's rows corrects the same."""
    broken_gate.apply(control, monkeypatch)
    check_implementation(impl, ASYNC, device, control)


@USES_ASYNC_SCHEDULING
def test_counts_read_before_their_copy_lands_fail_the_gate(monkeypatch, device, impl):
    """The next step corrects the lengths without synchronizing the copy's event: it reads poison."""
    broken_gate.apply("runner-counts-read-before-their-event", monkeypatch)
    with pytest.raises(AssertionError, match=r"valid sampled-token count on the host|corrected seq_len"):
        check_implementation(impl, ASYNC, device, "broken-counts-before-their-event")


@USES_ASYNC_SCHEDULING
def test_counts_of_the_same_row_after_condensing_fail_the_gate(monkeypatch, device, impl):
    """vllm-ascend#13864's class: the next step's rows are another order than this step's, and a correction
    that takes each row's counts from the same row corrects one request by another's rejections."""
    broken_gate.apply("runner-counts-of-the-same-row", monkeypatch)
    with pytest.raises(AssertionError, match=r"corrected seq_len|num_computed_tokens on the device|num_accepted"):
        check_implementation(impl, ASYNC, device, "broken-counts-of-the-same-row")


@USES_ASYNC_SCHEDULING
def test_placeholders_reaching_the_next_step_fail_the_gate(monkeypatch, device, impl):
    """The next step's input ids keep the scheduler's placeholders where this step's drafts go."""
    broken_gate.apply("runner-placeholders-reach-the-model", monkeypatch)
    with pytest.raises(AssertionError, match=r"the next step's input ids: got \[\d+, -1"):
        check_implementation(impl, ASYNC, device, "broken-placeholders")


@USES_ASYNC_SCHEDULING
def test_a_new_request_corrected_as_another_fails_the_gate(monkeypatch, device, impl):
    """The device-side correction without its mask for new rows: the next step's new request takes row
    0's counts, and its computed tokens are another request's."""
    broken_gate.apply("runner-new-rows-corrected-as-the-first", monkeypatch)
    with pytest.raises(AssertionError, match=r"a new request's next-step row"):
        check_implementation(impl, ASYNC, device, "broken-new-rows")
