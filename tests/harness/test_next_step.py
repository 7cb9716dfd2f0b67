"""What a runner hands its next step under asynchronous scheduling (``sim.oracle.next_step``), and the
scenario field that asks for it (``Scenario.async_scheduling``): the reference on worked cases, the
comparison naming the first request that differs, and what is refused by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from devices.sim import SimDevice
from mtp.config import ProposerConfig
from sim.impls import core
from sim.oracle import next_step
from sim.oracle.cases import BatchCase, RequestCase
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

CONFIG = ProposerConfig(3, 96, 4, 96, 64, 8)
# a decode that verified 3 drafts and kept the first (sampled: the kept draft, the target's token);
# a partial prefill, its sample discarded; a prefill's last chunk (no drafts, one sample)
DECODE = RequestCase([10, 11, 12, 13, 50], 20, 4, 3, [11, 40, -1, -1], False, [0, 1, 2, 3, 4, 5, 6])
PARTIAL = RequestCase([7, 8, 9], 0, 2, 0, [33, -1, -1, -1], True, [7])
LAST_CHUNK = RequestCase([4, 5, 6], 8, 2, 0, [21, -1, -1, -1], False, [8, 9, 10])
CASE = BatchCase(CONFIG, [DECODE, PARTIAL, LAST_CHUNK], seed=0)
DRAFTS = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]


def test_the_reference_on_worked_requests():
    want = next_step.expected(CASE, DRAFTS)
    assert want.next_tokens.tolist() == [40, 9, 21]  # the target's token; the backup; the sample
    assert want.valid_counts.tolist() == [2, 0, 1]
    assert want.seq_lens.tolist() == [24 - 2, 2, 10]  # two of the decode's four rows rejected
    assert want.num_computed.tolist() == want.seq_lens.tolist()
    assert want.num_accepted.tolist() == [2, 1, 1]  # a request that verified no draft keeps 1
    assert want.input_ids.tolist() == [[40, 1, 2, 3], [9, 4, 5, 6], [21, 7, 8, 9]]
    assert want.new_request.tolist() == [*next_step.NEW_PROMPT, len(next_step.NEW_PROMPT), 0, 1]


def test_the_next_step_moves_every_row_and_holds_a_new_one():
    assert next_step.next_rows(3) == [2, None, 1, 0]
    assert next_step.next_rows(1) == [None, 0]


def test_the_comparison_names_the_first_request_that_differs():
    want = next_step.expected(CASE, DRAFTS)
    got = want._replace(seq_lens=torch.tensor([22, 2, 11]), new_request=torch.tensor([5, 7, 2, 31, 1]))
    found = [str(m) for m in next_step.compare(4, CASE, got, DRAFTS)]
    assert found == [
        "iteration 4, request 2: the next step's corrected seq_len (less its query): got 11, want 10",
        "iteration 4, batch: a new request's next-step row (input ids, seq_len, num_computed, num_accepted): "
        "got [5, 7, 2, 31, 1], want [5, 7, 2, 0, 1]",
    ]
    assert next_step.compare(4, CASE, want, DRAFTS) == []


def test_async_scheduling_unpadded_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^async_scheduling=True with padded=False: .*disable_padded_drafter_batch"):
        Scenario(async_scheduling=True, padded=False)


def test_the_core_refuses_async_scheduling_by_name():
    scenario = Scenario(async_scheduling=True, requests=(RequestSpec(0, 5, 4),))
    assert "lacks the model runner's asynchronous scheduling" in core().refuses(scenario, "sim")
    with pytest.raises(ValueError, match=r"^async_scheduling=True: the core is the proposer alone"):
        run_scenario(scenario, SimDevice())


def test_replay_files_without_the_field_load_synchronous():
    scenario = Scenario(requests=(RequestSpec(0, 5, 4),))
    data = dataclasses.asdict(scenario)
    del data["async_scheduling"]
    loaded = Scenario.from_dict(data | {"requests": [dataclasses.asdict(r) for r in scenario.requests]})
    assert loaded.async_scheduling is False
