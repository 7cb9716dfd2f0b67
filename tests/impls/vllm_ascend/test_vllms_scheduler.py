"""vLLM's own schedule under vllm-ascend where the env's vLLM keeps the first-scheduling rule from before vLLM #43733
(vLLM before 0.23, under the release branches up to v0.22.1rc: ``scheduler_lacks.VLLM_WITHOUT_LOOKAHEAD``, read off
vLLM's source): the gate's runs on vLLM's schedule, and the suites' (``test_scheduled_by_vllm.py``,
``test_ascend_schedulers.py``), are refused there, saying why; this pin runs the schedule past the refusal and shows the
run stopping at a request's first scheduling, and fails the day it does not, so that the reading is mended."""

from __future__ import annotations

import pytest

from sim.impls.features import Feature
from sim.serving.run import run_scenario
from sim.serving.simulator import SchedulerDefect
from tests.properties.test_vllm_schedules import GREEDY


def test_vllms_own_schedule_stops_at_a_first_scheduling_where_the_env_keeps_the_rule(device, impl):
    known = impl.lacking({Feature.VLLM_SCHEDULER}, device.name)
    if known is None:
        pytest.skip("the env's vLLM gives a first scheduling its lookahead: the gate's properties run its schedule")
    try:  # the implementation's proposer and rules without the implementation's refusal of the run
        run_scenario(GREEDY, device, ops=impl.ops, proposer_cls=impl.proposer_cls, rules=impl.rules)
    except SchedulerDefect as found:
        assert "its first scheduling from the waiting queue got no lookahead slots" in str(found), found
        return
    pytest.fail(
        "the run went through: vllm-scheduler-first-scheduling-without-lookahead is fixed otherwise than in the text"
        " it is read by; mend that reading (sim/impls/kit/ascend/schedulers.py: vllm_first_scheduling_without_lookahead)"
    )
