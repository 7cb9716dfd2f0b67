"""Breaks of vllm-ascend caught on the steps vLLM's own scheduler makes (``Scenario.scheduler = "vllm"``).

The gate runs every implementation on them (``test_propose_loop.py``'s ``SCHEDULED_BY_VLLM``: vLLM's
``Scheduler`` of the env's vLLM deciding the chunks, the drafts verified, the KV blocks, preemption); here a
broken vllm-ascend fails that run.
"""

from __future__ import annotations

import pytest

from sim.serving.run import run_scenario
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_propose_loop import SCHEDULED_BY_VLLM


@pytest.mark.parametrize(
    ("variant", "what"),
    [
        ("runner-positions-off-by-one", "positions"),
        ("sample-row-off-by-one", "input_ids"),
        ("computed-as-seq-lens", "seq_lens"),
    ],
)
def test_a_broken_vllm_ascend_fails_on_the_steps_vllms_scheduler_makes(monkeypatch, device, impl, variant, what):
    """The runner's positions one off, the first pass sampling the row after, the steps' lengths taken for
    the computed tokens (``broken_gate.VARIANTS``): each fails the run, at the value it breaks."""
    broken_gate.apply(variant, monkeypatch)
    report = run_scenario(SCHEDULED_BY_VLLM, device, impl)
    assert not report.ok and any(what in m.what for m in report.mismatches), report.mismatches[:3]
