"""Every grouped proposer on a group of one rank equals the reference.

A group of one runs a grouped proposer's own code (its checked gathers, the
PCP split and restore, the lm-head vocabulary slices and their padding, the
sequence-parallel split, both groups of a P x T mesh) in this process, with a one-rank all-gather: cheap
enough for the gate's fast part and for mutation testing (``tox -e mutate``),
which leaves the multi-process suites out. Groups of 2 and 4 ranks are
checked by ``tests/test_pcp.py`` and ``tests/test_tp.py``.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from mtp.collectives import END_STEP
from mtp.pcp_proposer import PcpProposer
from mtp.pcp_tp import PcpLmHeadTpProposer, PcpSharedExpertDpProposer, PcpTpRank
from mtp.shared_expert_dp import SharedExpertDpLmHeadTpProposer, SharedExpertDpProposer
from mtp.tp import LmHeadTpProposer
from sim.serving.run import run_scenario
from sim.serving.scenario import GRAPH_MODES, RequestSpec, Scenario
from tests.broken_pcp import PaddingRowsWriteKv
from tests.e2e_checks import check_scenario
from tests.example_budget import share
from tests.strategies.scenarios import scenarios

pytestmark = pytest.mark.order(2)  # whole serving runs: after the multi-rank cases every broken variant fails

GROUPED = [
    PcpProposer,
    LmHeadTpProposer,
    SharedExpertDpProposer,
    SharedExpertDpLmHeadTpProposer,
    PcpLmHeadTpProposer,  # the P x T mesh classes, on a 1 x 1 mesh
    PcpSharedExpertDpProposer,
]
GROUP_OF_ONE = share(8)


def one_rank_gather(tensor: torch.Tensor) -> torch.Tensor:
    """All-gather over a group of one: a copy of this rank's rows, as ``all_gather_rows`` returns."""
    return tensor.clone()


def check_group_of_one(device, cls, scenario: Scenario, name: str) -> None:
    """``scenario`` served by ``cls`` on a group of one equals the reference; the failure says how to replay."""
    group = {"rank": 0, "size": 1, "all_gather": one_rank_gather}
    if issubclass(cls, PcpTpRank):
        group |= {"tp_rank": 0, "tp_size": 1, "tp_all_gather": one_rank_gather}
    proposer_cls = functools.partial(cls, **group)
    # The CLI replays it on a real one-rank group.
    replay_args = f" --pcp 1 --proposer {cls.__module__}:{cls.__name__}"
    check_scenario(scenario, device, name, proposer_cls=proposer_cls, replay_args=replay_args)


@pytest.mark.parametrize("cls", GROUPED, ids=lambda c: c.__name__)
@GROUP_OF_ONE
@given(scenario=scenarios(max_reqs=4, max_iterations=10), mode=st.sampled_from(GRAPH_MODES))
def test_a_group_of_one_equals_the_reference(device, cls, scenario, mode, request):
    if mode != "eager" and not device.supports_graphs:
        mode = "eager"
    if mode == "full" and issubclass(cls, LmHeadTpProposer):
        mode = "piecewise"  # lm-head TP refuses full graphs (tests/test_tp_plan.py)
    event(f"mode={mode}")
    check_group_of_one(device, cls, dataclasses.replace(scenario, graph_mode=mode), request.node.name)


# A prefill of odd length beside a decode: PCP pads it to 2P = 2 chunks even on one rank.
ODD_PREFILL = Scenario(num_spec_tokens=3, block_size=2, requests=(RequestSpec(0, 5, 6), RequestSpec(0, 2, 6)))


@pytest.mark.order(-1)
def test_a_broken_grouped_proposer_fails_it(device):
    with pytest.raises(AssertionError, match="mismatches") as failed:
        check_group_of_one(device, PaddingRowsWriteKv, ODD_PREFILL, "broken-group-of-one")
    assert "--pcp 1 --proposer tests.broken_pcp:PaddingRowsWriteKv" in str(failed.value)


def test_the_closing_gather_comes_last_at_step_0(device):
    """``close_collectives`` issues one more checked gather, its header at draft step ``END_STEP``:
    a rank behind its peers meets it there (tests/test_tp.py, ranks at different collectives)."""
    sent, made = [], []

    def recording_gather(tensor):
        sent.append(tensor.clone())
        return tensor.clone()

    def factory(*args, **kwargs):
        made.append(PcpProposer(*args, rank=0, size=1, all_gather=recording_gather, **kwargs))
        return made[0]

    assert run_scenario(ODD_PREFILL, device, proposer_cls=factory).ok
    proposer, issued = made[0], made[0].collectives
    proposer.close_collectives()
    assert proposer.collectives == issued + 1
    assert sent[-2].tolist() == [issued + 1, END_STEP, 1], "the closing gather's header"
