"""vllm-ascend 0.13.0 on the steps vLLM 0.13's own scheduler makes: a request's first scheduling has no
lookahead slots, so the drafts of its first call run past its blocks (``divergences.FIRST_SCHEDULING_WITHOUT_LOOKAHEAD``).

The gate's run on vLLM's schedule (``test_vllm_schedules.py``'s ``SCHEDULED_BY_VLLM``) skips for 0.13.0 with that
reason; this pin shows it on every run, and fails the day the scheduler gives the lookahead, so the skip goes.
"""

from __future__ import annotations

import pytest

from sim.impls.vllm_ascend_0_13.adapter import Ascend013Proposer
from sim.impls.vllm_ascend_0_13.divergences import RULES
from sim.serving.run import run_scenario
from sim.serving.simulator import SchedulerDefect
from tests.properties.test_vllm_schedules import SCHEDULED_BY_VLLM


def test_a_first_scheduling_without_lookahead_slots_leaves_the_drafts_without_blocks(device):
    try:
        run_scenario(SCHEDULED_BY_VLLM, device, proposer_cls=Ascend013Proposer, rules=RULES)
    except SchedulerDefect as found:
        assert "its first scheduling from the waiting queue got no lookahead slots" in str(found), found
        return
    pytest.fail(
        "vLLM's scheduler gave every request blocks for its drafts: drop FIRST_SCHEDULING_WITHOUT_LOOKAHEAD from"
        " sim/impls/vllm_ascend_0_13/divergences.py's LACKS, and the gate runs vLLM's schedule on 0.13.0"
    )
