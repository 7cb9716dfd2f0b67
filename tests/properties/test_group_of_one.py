"""Every grouped proposer on a group of one rank equals the reference.

A group of one runs a grouped proposer's own code (its checked gathers, the
PCP split and restore, the lm-head vocabulary slices and their padding, the
sequence-parallel split, both groups of a P x T mesh) in this process, with a one-rank all-gather: cheap
enough for the gate's fast part and for mutation testing (``tox -e mutate``),
which leaves the multi-process suites out. Groups of 2 and 4 ranks are
checked by ``tests/properties/test_pcp.py`` and ``tests/properties/test_tp.py``.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from mtp.collectives import END_STEP, CollectiveError
from mtp.ops import CoreOps
from mtp.pcp_proposer import PcpProposer
from mtp.pcp_tp import PcpLmHeadTpProposer, PcpSharedExpertDpProposer, PcpTpRank
from mtp.proposer import FIRST, STEP, GraphMode, MtpProposer
from mtp.shared_expert_dp import SharedExpertDpLmHeadTpProposer, SharedExpertDpProposer
from mtp.tp import LmHeadTpProposer
from sim.serving.run import build_models, run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.checks.e2e_checks import check_scenario
from tests.checks.example_budget import share
from tests.checks.modes import MODE_GROUPS, MODES, NEEDS_GRAPHS, per_group
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
GROUP_OF_ONE_PER_MODES = per_group(8)


def one_rank_gather(tensor: torch.Tensor) -> torch.Tensor:
    """All-gather over a group of one: a copy of this rank's rows, as ``all_gather_rows`` returns."""
    return tensor.clone()


def group_of_one(cls, gather=one_rank_gather, tp_gather=one_rank_gather) -> dict:
    """The group arguments of ``cls`` on a group of one rank (a 1 x 1 mesh for the mesh classes)."""
    group = {"rank": 0, "size": 1, "all_gather": gather}
    if issubclass(cls, PcpTpRank):
        group |= {"tp_rank": 0, "tp_size": 1, "tp_all_gather": tp_gather}
    return group


def check_group_of_one(device, cls, scenario: Scenario, name: str) -> None:
    """``scenario`` served by ``cls`` on a group of one equals the reference; the failure says how to replay."""
    proposer_cls = functools.partial(cls, **group_of_one(cls))
    # The CLI replays it on a real one-rank group.
    replay_args = f" --pcp 1 --proposer {cls.__module__}:{cls.__name__}"
    check_scenario(scenario, device, name, proposer_cls=proposer_cls, replay_args=replay_args)


@pytest.mark.parametrize("modes", MODE_GROUPS)
@pytest.mark.parametrize("cls", GROUPED, ids=lambda c: c.__name__)
@GROUP_OF_ONE_PER_MODES
@given(scenario=scenarios(max_reqs=4, max_iterations=10), data=st.data())
def test_a_group_of_one_equals_the_reference(device, cls, modes, scenario, data, request):
    mode = data.draw(st.sampled_from(modes), label="mode")
    if mode == "full" and issubclass(cls, LmHeadTpProposer):
        mode = "piecewise"  # lm-head TP refuses full graphs (tests/properties/test_tp_plan.py)
    event(f"mode={mode}")
    check_group_of_one(device, cls, dataclasses.replace(scenario, graph_mode=mode), request.node.name)


# A prefill of odd length beside a decode: PCP pads it to 2P = 2 chunks even on one rank.
ODD_PREFILL = Scenario(num_spec_tokens=3, block_size=2, requests=(RequestSpec(0, 5, 6), RequestSpec(0, 2, 6)))


def _recording(sent: list):
    """A one-rank all-gather that keeps a copy of everything sent through it."""

    def gather(tensor):
        sent.append(tensor.clone())
        return tensor.clone()

    return gather


@pytest.mark.parametrize(
    "cls, mode",
    [
        (PcpProposer, "eager"),
        (PcpLmHeadTpProposer, "eager"),
        pytest.param(LmHeadTpProposer, "piecewise", marks=NEEDS_GRAPHS),
    ],
    ids=lambda p: getattr(p, "__name__", p),
)
def test_the_closing_gathers_come_last_at_step_0(device, cls, mode):
    """Each group numbers its gathers 1, 2, ... in the order issued (outside a capture: a header,
    then the rows), the first at step 1 (a first pass; under piecewise graphs, that of the first
    capture's dummy run), and ``close_collectives`` issues one more on each group, its header at draft
    step ``END_STEP``: a rank behind its peers meets it there (tests/properties/test_tp.py)."""
    sent, made = {"group": [], "tp": []}, []
    group = group_of_one(cls, _recording(sent["group"]), _recording(sent["tp"]))

    def factory(*args, **kwargs):
        made.append(cls(*args, **group, **kwargs))
        return made[0]

    assert run_scenario(dataclasses.replace(ODD_PREFILL, graph_mode=mode), device, proposer_cls=factory).ok
    proposer = made[0]
    issued = {"group": proposer.collectives, "tp": getattr(proposer, "tp_collectives", 0)}
    proposer.close_collectives()
    for name in ["group", "tp"] if issubclass(cls, PcpTpRank) else ["group"]:
        tensors = sent[name]
        headers = [h.tolist() for h in tensors[0::2]]
        assert [h[0] for h in headers] == list(range(1, issued[name] + 2)), f"{name} gathers' numbers"
        assert headers[0][1] == 1, f"{name}: the first gather's step"
        assert headers[-1] == [issued[name] + 1, END_STEP, 1], f"{name}: the closing gather's header"
        assert tensors[-1].tolist() == [0], f"{name}: the closing gather's payload"
    assert proposer.collectives == issued["group"] + 1


def _one_rank(cls, device, gather=one_rank_gather, tp_gather=one_rank_gather, **core):
    """``cls`` on a group of one, configured for ``ODD_PREFILL``."""
    model, target = build_models(ODD_PREFILL, device.torch_device)
    return cls(ServingSim(ODD_PREFILL, target).config, model, device, **core, **group_of_one(cls, gather, tp_gather))


MODEL_DTYPES = {  # what mtp.model.DraftModel and AttentionMeta document, and NPU kernels require
    "input_ids": torch.int32,
    "positions": torch.int64,
    "hidden_states": torch.float32,
    "query_start_loc": torch.int32,
    "seq_lens": torch.int32,
    "block_table": torch.int32,
    "slot_mapping": torch.int64,
}


@pytest.mark.parametrize(
    "cls, mrope",
    [(MtpProposer, False), (MtpProposer, True), (PcpProposer, True), *((c, False) for c in GROUPED)],
    ids=lambda v: v.__name__ if isinstance(v, type) else ("mrope" if v else ""),
)
def test_the_model_gets_the_documented_dtypes(device, cls, mrope):
    """Every model call's inputs, in their documented dtypes: a float id or an int64 length equals
    an int32 one by value, so no draft shows it, but kernels on hardware reject it. A PCP rank's
    own rows get their metadata built apart from the core's."""
    seen = []

    class Recorded(cls):
        def model_forward(self, input_ids, positions, hidden_states, attn):
            tensors = {"input_ids": input_ids, "positions": positions, "hidden_states": hidden_states}
            tensors |= {name: getattr(attn, name) for name in MODEL_DTYPES if name not in tensors}
            seen.append({name: t.dtype for name, t in tensors.items()})
            return super().model_forward(input_ids, positions, hidden_states, attn)

    group = {} if cls is MtpProposer else group_of_one(cls)
    scenario = dataclasses.replace(ODD_PREFILL, mrope=mrope)
    assert run_scenario(scenario, device, proposer_cls=functools.partial(Recorded, **group)).ok
    assert seen and all(dtypes == MODEL_DTYPES for dtypes in seen), seen


@NEEDS_GRAPHS
@pytest.mark.parametrize("cls", GROUPED, ids=lambda c: c.__name__)
def test_a_grouped_proposer_keeps_the_core_arguments(device, cls):
    """The ops, graph mode and capture sizes given reach the core (a broken ``ops`` must run)."""
    ops = CoreOps()
    proposer = _one_rank(cls, device, ops=ops, mode="piecewise", capture_sizes=[2, 4])
    assert proposer.ops is ops
    assert proposer.mode is GraphMode.PIECEWISE
    assert proposer.sizes[FIRST].sizes == (2, 4)


def test_a_rank_outside_its_group_is_refused(device):
    with pytest.raises(ValueError, match=r"^rank=1: must lie in \[0, size=1\)$"):
        PcpProposer(None, None, device, rank=1, size=1, all_gather=one_rank_gather)
    with pytest.raises(ValueError, match=r"^tp_rank=1: must lie in \[0, tp_size=1\)$"):
        PcpLmHeadTpProposer(
            None, None, device, rank=0, size=1, all_gather=one_rank_gather, tp_rank=1, tp_size=1, tp_all_gather=None
        )


def test_lm_head_tp_needs_a_sharded_lm_head(device):
    with pytest.raises(ValueError, match=r"^model: lm-head TP needs compute_logits_shard\(hidden, rank, size\)$"):
        LmHeadTpProposer(None, object(), device, rank=0, size=1, all_gather=one_rank_gather)


@pytest.mark.parametrize("failing", ["gather", "tp_gather"])
def test_a_failing_gather_names_the_collective_and_the_rank(device, failing):
    def gone(_):
        raise RuntimeError("peer gone")

    proposer = _one_rank(PcpLmHeadTpProposer, device, **{failing: gone})
    with pytest.raises(CollectiveError, match=r"^collective #1 on rank 0 failed: peer gone$"):
        proposer.close_collectives()


class AgreedRowsRecorded(LmHeadTpProposer):
    """Lm-head TP noting, per call and per dummy run (those of a capture included), the rows each
    vocabulary gather carried and the rows every rank must agree on: ``max_num_reqs`` in a dummy run
    or with a prefill in the batch, else the batch's token count padded to the first pass's graph
    size (``num_input_tokens`` in vLLM)."""

    def __init__(self, *args, **kwargs):
        self.calls: list[tuple[int, list[int]]] = []  # (agreed rows, rows of each gather), as they end
        self._open: list[list[int]] = []  # gathers of the calls under way, innermost last
        super().__init__(*args, **kwargs)

    def _noted(self, agreed, run, *args):
        self._open.append([])
        try:
            return run(*args)
        finally:
            self.calls.append((agreed(), self._open.pop()))

    def propose(self, batch, sampled):
        has_prefill = bool((batch.num_draft_tokens_cpu == 0).any())

        def agreed() -> int:
            return self.cfg.max_num_reqs if has_prefill else self._size(FIRST, batch.num_tokens)

        return self._noted(agreed, super().propose, batch, sampled)

    def dummy_run(self, size):
        return self._noted(lambda: self.cfg.max_num_reqs, super().dummy_run, size)

    def tp_gather(self, tensor):
        self._open[-1].append(tensor.shape[0])
        return super().tp_gather(tensor)


@pytest.mark.parametrize("mode", MODES[:2])  # lm-head TP refuses full graphs
@GROUP_OF_ONE_PER_MODES
@given(scenario=scenarios(max_reqs=4, max_iterations=6), warm_up=st.booleans())
def test_lm_head_gathers_carry_the_agreed_rows(device, scenario, mode, warm_up):
    """Ranks of a data-parallel group hold different batches: every vocabulary gather must carry the
    row count they all agree on, which one rank's drafts never show (the padding rows are cut)."""
    made = []

    def factory(*args, **kwargs):
        made.append(AgreedRowsRecorded(*args, **group_of_one(LmHeadTpProposer), **kwargs))
        if warm_up:  # graphs captured now, else at the first call
            made[0].dummy_run(1)
        return made[0]

    assert run_scenario(dataclasses.replace(scenario, graph_mode=mode), device, proposer_cls=factory).ok
    made[0].dummy_run(min(made[0].sizes[STEP]))  # a size the steps have graphs (or, eagerly, buffers) for
    for i, (agreed, rows) in enumerate(made[0].calls):
        assert set(rows) <= {agreed}, f"call {i}: vocabulary gathers of {rows} rows, agreed {agreed}"
    if scenario.num_spec_tokens > 1:  # draft steps 2..K sample in a dummy run
        assert made[0].calls[-1][1], "the last dummy run gathered no vocabulary slices"


@NEEDS_GRAPHS
@pytest.mark.parametrize("cls", [PcpProposer, PcpLmHeadTpProposer], ids=lambda c: c.__name__)
def test_a_proposer_with_nothing_to_capture_warms_up_once(device, cls):
    """K=1 under PCP: the first pass runs eagerly and there are no steps, so piecewise graphs capture
    nothing. The dummy runs of that (empty) capture happen once, in the first call, and leave that
    call's own request count alone: lm-head TP, whose agreed size is the decode's token count, found
    one request sampled as ``max_num_reqs`` rows otherwise."""
    dummy_runs, made = [], []

    def factory(*args, **kwargs):
        proposer = cls(*args, **group_of_one(cls), **kwargs)
        proposer.dummy_run = functools.partial(_counted, proposer.dummy_run, dummy_runs)
        made.append(proposer)
        return proposer

    scenario = Scenario(
        num_spec_tokens=1,
        block_size=1,
        max_model_len=12,
        token_budget=3,
        max_num_reqs=3,
        padded=False,
        graph_mode="piecewise",
        accept="greedy",
        vocab_size=32,
        max_iterations=10,
        requests=(RequestSpec(0, 1, 2),),
    )
    report = check_scenario(scenario, device, f"nothing-to-capture-{cls.__name__}", proposer_cls=factory)
    assert report.iterations > 1 and made[0].graphs == {}
    assert len(dummy_runs) == len(set(made[0].sizes[FIRST]) | set(made[0].sizes[STEP]))


def _counted(run, calls, size):
    calls.append(size)
    return run(size)
