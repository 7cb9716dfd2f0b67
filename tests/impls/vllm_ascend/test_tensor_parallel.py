"""vllm-ascend's drafter on two tensor-parallel ranks (``sim.impls.vllm_ascend.tensor_parallel``), eagerly
and under full graphs, its draft tokens taken from an lm head split by vocabulary over the ranks: the
logits all-gathered, or each rank's slice reduced by the drafter's ``greedy_sample`` (vllm-ascend's
``enable_reduce_sample``). Each rank drafts what the reference drafts, with the reference's per-step
metadata, and the ranks issue the same collectives over the TP group. The known defect
``reduce-sample-ids-of-a-short-last-shard`` is pinned against the spec, and its fix meets it; each TP
break of the drafter (``tp_breaks``) is seen failing here (the rejection sampler on the same ranks:
``test_tensor_parallel_sampling``). Under a changed vllm-ascend (``MTP_BROKEN_VLLM_ASCEND``) the
ranks run it too (``broken_gate.apply_in_rank``)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from sim import cli
from sim.impls.features import Feature
from sim.impls.vllm_ascend import branch_divergences, generation
from sim.impls.vllm_ascend.accepted import accepted_by
from sim.impls.vllm_ascend.tensor_parallel import (
    EAGLE_LOCAL_ARGMAX,
    REDUCE_SAMPLE_DEFECT,
    Forward,
    TpCase,
    TpPool,
    TpRankResult,
    check_tp,
    local_argmax_report,
    reduce_sample,
    reduce_sample_report,
)
from sim.ranks.pool import RankFailure
from tests.checks.known_defects import pin
from tests.checks.modes import USES_ASYNC_SCHEDULING, USES_KERNEL_BLOCKS, USES_REDUCE_SAMPLE, USES_VLLM_SCHEDULER
from tests.impls.vllm_ascend import broken_gate, tp_breaks
from tests.impls.vllm_ascend.cases import (
    REST_OF_PATH,
    SETUP,
    VLLM_SCHEDULED_ON_RANKS,
    WHOLE_SLICES,
    first_of_path,
    with_replay,
)
from tests.properties.test_propose_loop import FAMILY_FIELDS, TYPICAL
from tests.properties.test_vllm_schedules import SCHEDULED_BY_VLLM
from tests.session_impls import impl_of

MODES = ("eager", "full")
SAMPLING = {"gathered": False, "reduce-sample": True}
SAMPLING_PARAMS = [pytest.param("gathered"), pytest.param("reduce-sample", marks=USES_REDUCE_SAMPLE)]
# the drafter: MTP (its draft layer of each attention family), EAGLE-1, EAGLE-3 (its reduce-sample path
# calls the draft's logits processor itself), MTP under the runner's asynchronous scheduling
DRAFTERS = {
    "mtp": {},
    **{f"mtp-{attn}": fields for attn, fields in FAMILY_FIELDS.items()},
    "eagle": {"method": "eagle"},
    "eagle3": {"method": "eagle3"},
    "mtp-async": {"async_scheduling": True},
}
# each drafter with each sampling, but EAGLE-1 under reduce sampling, which crashes (EAGLE_DEFECT: its pin)
DRAFTS = [(d, s) for d in DRAFTERS for s in SAMPLING if (d, s) != ("eagle", "reduce-sample")]
EAGLE_DEFECT = "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks"
MTP_GATHER = branch_divergences.MTP_GATHER.id  # v0.21.0rc and v0.22.1rc
EAGLE_GATHER = "self.model.model.logits_processor._gather_logits(logits)"  # where it raises, in the traceback
WATCH = ("tests.checks.stand_ins:watched_in_rank",)  # each rank watches the stand-ins


def _uses(draft: tuple[str, str]) -> list:
    """The ``uses`` marks of a (drafter, sampling) pair: asynchronous scheduling, reduce sampling."""
    drafter, sampling = draft
    return [USES_ASYNC_SCHEDULING] * ("async_scheduling" in DRAFTERS[drafter]) + [USES_REDUCE_SAMPLE] * SAMPLING[
        sampling
    ]


@pytest.fixture
def pool(tp_pool):
    return tp_pool


def _case(mode: str, reduce_sample: bool, setup=(SETUP,), spec: bool = False, size: int = 2, **fields) -> TpCase:
    return TpCase.of(dataclasses.replace(TYPICAL, graph_mode=mode, **fields), reduce_sample, setup, spec, size)


def _agree(case: TpCase, pool, name: str) -> list[str]:
    """The ranks' problems, with the case's replay where there are some (the divergences the ranks
    accepted in it)."""
    case = accepted_by(case, pool.divergences)
    return with_replay(check_tp(case, pool), case, f"tp-{name}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("drafter", "sampling"), first_of_path(DRAFTS, first=2, uses=_uses), ids=[f"{d}-{s}" for d, s in DRAFTS]
)
def test_tp_ranks_draft_the_reference_and_issue_the_same_collectives(pool, drafter, sampling, mode):
    """Reduce-sample cases run a vocabulary of whole 64-id slices, as every model served has: there the
    known defect cannot show (``reduce_sample_report`` None), and the spec alone holds. An EAGLE-3
    drafter under reduce sampling hands the lm head to the draft's logits processor itself."""
    reduce_sample = SAMPLING[sampling]
    vocab = {"vocab_size": WHOLE_SLICES} if reduce_sample else {}
    case = _case(mode, reduce_sample, **DRAFTERS[drafter], **vocab)
    assert _agree(case, pool, f"{drafter}-{sampling}-{mode}") == []


@USES_KERNEL_BLOCKS
def test_tp_ranks_of_a_hybrid_target_over_kernel_blocks(pool):
    """A hybrid target's layout (blocks of 8 tokens, kernel blocks of 2: Qwen3.5's, served on TP ranks) in full
    graphs: every rank's runner table of kernel blocks, its drafts the reference's, its collectives its peers'
    (the logits gathered: how a rank samples is the other cases' question)."""
    case = _case("full", False, block_size=8, kernel_block_size=2, capture_sizes=(2, 8))
    assert _agree(case, pool, "kernel-blocks") == []


@USES_VLLM_SCHEDULER
@VLLM_SCHEDULED_ON_RANKS
def test_tp_ranks_on_the_steps_vllms_scheduler_makes(pool, asynchronous, mode):
    """``SCHEDULED_BY_VLLM`` (its preemptions) on TP ranks: vLLM's engine schedules once for every TP worker;
    here each rank's own ``Scheduler`` (``AsyncScheduler``) of the same requests and blocks makes that one
    schedule (vLLM's scheduling is deterministic), and every rank drafts the reference with the same
    collectives."""
    scenario = dataclasses.replace(SCHEDULED_BY_VLLM, graph_mode=mode, async_scheduling=asynchronous)
    assert _agree(TpCase.of(scenario, setup=(SETUP,)), pool, f"vllm-scheduled-{mode}") == []


@pytest.mark.parametrize("sampling", SAMPLING_PARAMS)
def test_tp_ranks_touch_no_stand_in(pool, sampling):
    """No value of the ranks' serving runs under full graphs comes from the fake ``torch_npu``'s mocks (each
    rank watches them; the sampler's batches: ``test_tensor_parallel_sampling``)."""
    reduce_sample = SAMPLING[sampling]
    assert check_tp(_case("full", reduce_sample, setup=WATCH, vocab_size=WHOLE_SLICES), pool) == []


@REST_OF_PATH
def test_four_tp_ranks_draft_the_reference(device, accepted, request):
    """Four ranks (slices of 32 of a 128-id vocabulary; every rank's offset a different multiple), the
    logits gathered and, where the generation has reduce sampling (``Feature.REDUCE_SAMPLE``), reduced,
    eagerly (one pool of four for both)."""
    if device.name != "sim":
        pytest.skip(f"tensor-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    reduces = impl_of(request.node).lacking({Feature.REDUCE_SAMPLE}, device.name) is None
    ranks = TpPool(4, accepted, case_timeout_s=120)
    try:
        for reduce_sample in (False, True)[: 1 + reduces]:
            case = _case("eager", reduce_sample, vocab_size=WHOLE_SLICES, size=4)
            assert _agree(case, ranks, f"four-ranks-{reduce_sample}") == []
    finally:
        ranks.close()


@USES_REDUCE_SAMPLE
@REST_OF_PATH
@pytest.mark.parametrize("mode", MODES)
def test_reduce_sample_over_a_short_last_shard_follows_the_defect_or_the_spec(pool, mode, defect_accepted, request):
    """On the tiny model's 96 ids the last rank keeps 32 of its 64. Accepted, the pin records which the ranks
    followed: the defect's drafts (``Rules.sample_report``, every other value the spec's) or the spec's
    (fixed: the session ends with the defect's "fixed:" line); either else fails, naming both. Dropped
    from the session's list, the spec alone. Where the MTP drafter gathers its columns instead
    (``MTP_GATHER``, v0.21.0rc and v0.22.1rc), the pin records its crash."""
    assert reduce_sample_report(WHOLE_SLICES, 2) is None and reduce_sample_report(96, 2) is not None
    if any(d.id == MTP_GATHER for d in impl_of(request.node).divergences):  # v0.21.0rc, v0.22.1rc: a crash
        try:
            problems = check_tp(_case(mode, True), pool)
        except RankFailure as crash:  # in the gather, or gloo aborting a rank there (SIGABRT)
            assert re.search(r"_gather_logits|exited with code -6", str(crash)), crash
            pin(MTP_GATHER, present=True, fixed=False)
        else:
            pin(MTP_GATHER, present=False, fixed=problems == [], detail=problems)
        return
    spec = check_tp(_case(mode, True, spec=True), pool)
    if not defect_accepted:
        assert with_replay(spec, _case(mode, True, spec=True), f"reduce-sample-short-last-shard-{mode}") == []
        return
    shown = check_tp(_case(mode, True), pool)
    pin(REDUCE_SAMPLE_DEFECT, present=shown == [], fixed=spec == [], detail=spec[:1] + shown[:1])


def test_reduce_sampling_on_a_checkout_without_it_is_refused_by_name(monkeypatch):
    """A checkout whose config has no ``enable_reduce_sample`` (v0.18.0) would read the flag nowhere: a rank
    asked for reduce sampling there stops naming it, before anything is set."""
    monkeypatch.setattr(generation, "has_reduce_sample", lambda: False)
    with pytest.raises(ValueError, match=r"reduce_sample=True: this checkout has no reduce sampling"):
        with reduce_sample(True):
            pass


def test_the_reduce_sample_report_of_a_short_last_shard():
    """96 ids on 2 ranks: slices of 64 (the vocabulary padded to 128), the last keeps 32 and reports
    ids 64..95 as 32..63; 4 ranks: slices of 32, the last keeps nothing past 95."""
    assert reduce_sample_report(96, 2) == (*range(64), *range(32, 64))
    assert reduce_sample_report(96, 4) is None
    assert reduce_sample_report(100, 2) == (*range(64), *range(36, 72))


def test_each_ranks_own_columns_report():
    """v0.22.1rc's EAGLE-1 under reduce sampling: 128 ids on 2 ranks, each reports its 64 as 0..63 and never
    the other's; 96 ids: the last keeps 32."""
    assert local_argmax_report(128, 0, 2) == (*range(64), *[-1] * 64)
    assert local_argmax_report(128, 1, 2) == (*[-1] * 64, *range(64))
    assert local_argmax_report(96, 1, 2) == (*[-1] * 64, *range(32))


@USES_REDUCE_SAMPLE
def test_an_eagle_drafter_under_reduce_sample_follows_its_known_defect(pool, request):
    """An EAGLE-1 drafter under reduce sampling. 0.23.0 and main: ``EAGLE_DEFECT``, it raises where it gathers
    its logits through the draft's inner model's logits processor, which vLLM's EAGLE-1 draft does not have.
    v0.21.0rc and v0.22.1rc: ``EAGLE_LOCAL_ARGMAX``, each rank drafts its own columns' argmax, no collective
    issued (modelled: ``local_argmax_report``). Accepted, the pin records what the ranks did: the defect, or
    drafts that meet the spec (fixed: the session ends with the defect's "fixed:" line); dropped from the
    session's list, the case is held to the spec."""
    case = _case("eager", True, method="eagle", vocab_size=WHOLE_SLICES)
    accepted = {d.id for d in impl_of(request.node).divergences}
    if EAGLE_LOCAL_ARGMAX in accepted:
        spec = check_tp(dataclasses.replace(case, spec=True), pool)
        pin(EAGLE_LOCAL_ARGMAX, present=check_tp(case, pool) == [], fixed=spec == [], detail=spec[:1])
        return
    if EAGLE_DEFECT not in accepted:
        assert _agree(case, pool, "eagle-reduce-sample") == []
        return
    try:
        problems = check_tp(case, pool)
    except RankFailure as crash:
        assert EAGLE_GATHER in str(crash), crash
        pin(EAGLE_DEFECT, present=True, fixed=False)
    else:
        pin(EAGLE_DEFECT, present=False, fixed=problems == [], detail=problems)


@USES_REDUCE_SAMPLE
def test_the_fix_of_the_eagle_gather_meets_the_spec(pool):
    """``EAGLE_DEFECT`` fixed (``broken_gate.FIXES``: the gather through the draft's own logits processor):
    an EAGLE-1 drafter under reduce sampling drafts the reference's, eagerly and under full graphs."""
    if not _in_force(EAGLE_DEFECT):
        pytest.skip(
            f"{EAGLE_DEFECT}: not this checkout's (generation {generation.name()}), its fix edits lines it has not"
        )
    name = "eagle-gathers-through-the-drafts-own-processor"
    for mode in MODES:
        case = _case(mode, True, setup=(SETUP, name), spec=True, method="eagle", vocab_size=WHOLE_SLICES)
        assert _agree(case, pool, f"eagle-reduce-sample-fixed-{mode}") == []


def _in_force(defect: str) -> bool:
    """Whether the checkout's generation has ``defect`` (``branch_divergences.in_force``), whatever the session accepts."""
    return defect in branch_divergences.in_force(generation.name()).DIVERGENCES


@USES_REDUCE_SAMPLE
def test_the_fix_of_the_short_last_shard_meets_the_spec(pool):
    """The defect fixed (``broken_gate.FIXES``: each rank's ids offset by where its slice starts, written
    otherwise than the checkout's reduction, in the drafter's and the rejection sampler's greedy, and the
    sampler's random candidates taken from slices of one width) meets the spec in the drafts, eager and
    under full graphs, where the defect's model no longer holds: the gate says the fix is there (the
    sampler's side: ``test_tensor_parallel_sampling``)."""
    if _in_force(MTP_GATHER):
        pytest.skip(f"{MTP_GATHER}: this checkout's MTP drafter gathers its columns, no greedy_sample to fix")
    name = "reduce-sample-ids-from-the-slice-start"
    fixes = [fixing for _, fixing in broken_gate.FIXES[name][1]]
    assert fixes == [tp_breaks.draft_ids_from_the_slice_start] * 2 + [tp_breaks.candidates_from_the_slice_start]
    for mode in MODES:
        assert _agree(_case(mode, True, setup=(SETUP, name), spec=True), pool, f"reduce-sample-fixed-{mode}") == []
    assert any("draft" in p for p in check_tp(_case("eager", True, setup=(SETUP, name)), pool))


@pytest.mark.parametrize(
    "variant, breaking, reduce_sample",
    [
        # EAGLE-3: its reduce sampling is greedy_sample's in every generation (v0.22.1rc's MTP gathers instead)
        pytest.param(
            "tp-draft-ids-of-the-local-slice", tp_breaks.draft_ids_of_the_local_slice, True, marks=USES_REDUCE_SAMPLE
        ),
        ("tp-logits-not-gathered", tp_breaks.logits_not_gathered, False),
        ("tp-draft-forward-told-it-is-the-targets", tp_breaks.forward_told_it_is_the_targets, False),
    ],
)
def test_each_tp_break_is_caught(pool, variant, breaking, reduce_sample):
    """Each TP break, applied in the ranks, fails them, naming a draft or a draft forward. The ranks undo it
    after the case."""
    assert broken_gate.VARIANTS[variant][1] is breaking
    drafter = {"method": "eagle3", "vocab_size": WHOLE_SLICES} if reduce_sample else {}
    problems = check_tp(_case("eager", reduce_sample, setup=(SETUP, variant), **drafter), pool)
    assert any("draft" in p for p in problems), problems


@pytest.mark.parametrize("mode", MODES)
def test_logits_gathered_otherwise_pass(pool, mode):
    """The control of ``tp-logits-not-gathered``: the logits gathered by an all-reduce of each rank's columns
    placed in zeros, right and written otherwise, pass (so the check is of the gather's loss alone)."""
    control = "tp-logits-gathered-by-all-reduce"
    assert broken_gate.CONTROLS[control][1] is tp_breaks.logits_gathered_by_all_reduce
    assert _agree(_case(mode, False, setup=(SETUP, control)), pool, f"{control}-{mode}") == []


def test_a_tp_case_file_replays_as_saved(tmp_path):
    for accepting in (None, (), (REDUCE_SAMPLE_DEFECT,)):
        case = dataclasses.replace(_case("full", True, setup=()), divergences=accepting)
        assert TpCase.from_dict(json.loads(case.save(tmp_path / "c.json").read_text())) == case


@REST_OF_PATH
def test_the_replay_command_a_failure_prints_runs_the_case(tmp_path, capsys, device):
    """``python -m sim replay FILE --impl vllm_ascend`` serves a saved TP case on its ranks and says they agree."""
    if device.name != "sim":
        pytest.skip(f"tensor-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    path = _case("eager", False, setup=(), vocab_size=WHOLE_SLICES).save(tmp_path / "tp.json")
    assert cli.main(["replay", str(path), "--impl", "vllm_ascend"]) == 0
    assert "2 tensor-parallel ranks agree" in capsys.readouterr().out


@pytest.mark.parametrize(
    "data, said",
    [
        ({"tp_ranks": [1]}, r"^tp_ranks=\[1\]: expected the scenario every TP rank serves$"),
        ({"tp_ranks": {}, "reduce_sample": "yes"}, r"^reduce_sample='yes': expected true or false$"),
        ({"tp_ranks": {"accept": "maybe"}}, r"^tp_ranks: accept='maybe': expected one of"),
        ({"tp_ranks": {}, "tp_size": 1}, r"^tp_size=1: a TP case has at least two ranks$"),
        (
            {"tp_ranks": {}, "tp_size": 4, "reduce_sample": True},
            r"^reduce_sample with vocab_size=96 on 4 ranks: rank 3 holds none of its ids",
        ),
        ({"tp_ranks": {}, "divergences": [1]}, r"^divergences=\[1\]: expected a list of the divergence ids"),
    ],
)
def test_a_bad_tp_case_names_the_field(data, said):
    with pytest.raises(ValueError, match=said):
        TpCase.from_dict(data)


def test_a_tp_case_for_another_implementation_is_one_line_and_exit_2(tmp_path, capsys):
    path = _case("eager", False, setup=()).save(tmp_path / "tp.json")
    assert cli.main(["replay", str(path), "--impl", "core"]) == 2
    assert "TP ranks run vllm-ascend's drafter on the simulator (--impl vllm_ascend)" in capsys.readouterr().err


DRAFT_FORWARD = Forward(rows=12, num_tokens=12, draft=True, flash_comm=False)
GATHER = "compute_logits > _gather_logits: all_gather"


class _Answered:
    """A pool of two whose ranks' results are made here (the checks across ranks on their own, no ranks):
    per rank, its collectives, and its draft forwards (by default one draft's)."""

    size, divergences = 2, None

    def __init__(self, *sites: list[str], forwards=((DRAFT_FORWARD,), (DRAFT_FORWARD,))):
        self.results = [
            TpRankResult(r, sites=list(s), forwards=list(f)) for r, (s, f) in enumerate(zip(sites, forwards))
        ]

    def run(self, case):
        return self.results


@pytest.mark.parametrize(
    "forwards, said",
    [
        (
            [(DRAFT_FORWARD,), (dataclasses.replace(DRAFT_FORWARD, flash_comm=True),)],
            "draft forward 0: rank 1: 12 rows, 12 tokens, draft True, FlashComm1 True: told FlashComm1 is on",
        ),
        (
            [(dataclasses.replace(DRAFT_FORWARD, draft=False),), (DRAFT_FORWARD,)],
            "draft forward 0: rank 0: 12 rows, 12 tokens, draft False, FlashComm1 False: not told it is a draft's",
        ),
        (
            [(DRAFT_FORWARD,), (dataclasses.replace(DRAFT_FORWARD, rows=16, num_tokens=16),)],
            "draft forward 0: the ranks were told different things: rank 0: 12 rows",
        ),
        ([(DRAFT_FORWARD,), ()], "the ranks ran different numbers of draft forwards: {0: 1, 1: 0}"),
        ([(), ()], "no draft forward was recorded on any rank"),
    ],
)
def test_draft_forwards_told_otherwise_are_named(forwards, said):
    problems = check_tp(_case("eager", False), _Answered([GATHER], [GATHER], forwards=forwards))
    assert len(problems) == 1 and problems[0].startswith(said), problems


def test_ranks_at_different_collectives_are_named():
    gather, reduce = (
        "compute_logits > _gather_logits: all_gather",
        "compute_draft_token_ids > greedy_sample: all_gather",
    )
    problems = check_tp(_case("eager", True), _Answered([gather, reduce], [gather, gather, reduce]))
    assert problems == [
        f"TP collective 1: the ranks issued different collectives: rank 0: {reduce}; rank 1: {gather}",
        "the ranks issued different numbers of TP collectives: {0: 2, 1: 3}",
    ]


def test_ranks_that_issue_no_collective_are_told_the_head_is_not_split():
    problems = check_tp(_case("eager", False), _Answered([], []))
    assert problems == ["no rank issued a collective over the TP group of 2: the lm head is not split"]


@USES_REDUCE_SAMPLE
def test_explain_names_the_pin_of_a_defect_only_ranks_show(capsys):
    """``python -m sim explain`` measures what a rule decides in a one-rank run: for this defect, one line
    naming its pin, exit 2 (not a search that finds nothing and an acceptance table of the other divergences)."""
    assert cli.main(["explain", REDUCE_SAMPLE_DEFECT, "--impl", "vllm_ascend"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{REDUCE_SAMPLE_DEFECT}: no rule models it in a serving run of one rank" in err
    assert "test_tensor_parallel.py::test_reduce_sample_over_a_short_last_shard_follows_the_defect_or_the_spec" in err
