"""The gate catches a broken hand-off from vllm-ascend's runner to its drafter.

The drafts come through the runner's own ``propose_draft_token_ids`` (``sim.impls.vllm_ascend.handoff``),
so what it gathers for ``_propose`` is under test: target positions taken off by one by
``_get_positions``, or a scheduled-token count one short (the rows an all-prefill batch hands over),
fail a serving run (``handoff_breaks``, also ``broken_gate.VARIANTS`` for the whole gate).
"""

from __future__ import annotations

from tests.impls.suites import assert_serving_runs_fail
from tests.impls.vllm_ascend import broken_gate


def test_target_positions_off_by_one_fail_the_gate(monkeypatch, device, impl):
    """``_get_positions`` one past: the first pass is handed other positions than the batch's."""
    broken_gate.apply("runner-positions-off-by-one", monkeypatch)
    assert_serving_runs_fail(impl, device, "broken-runner-positions", r"positions")


def test_a_scheduled_token_count_one_short_fails_the_gate(monkeypatch, device, impl):
    """``num_scheduled_tokens`` one short: an all-prefill batch hands ``_propose`` one row too few,
    which either drafts from other rows or (a one-token batch: no row) makes ``_propose`` fail."""
    broken_gate.apply("runner-num-scheduled-tokens-short", monkeypatch)
    match = r"draft|input_ids|positions|expanded size"
    assert_serving_runs_fail(impl, device, "broken-runner-count", match, errors=(AssertionError, RuntimeError))
