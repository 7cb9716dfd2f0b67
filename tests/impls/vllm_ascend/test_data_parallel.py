"""vllm-ascend's drafter on two data-parallel ranks, and on four (two idle)
(``sim.impls.vllm_ascend.data_parallel``), eagerly and under full graphs, its draft layer of each
attention family (GQA, MLA, SFA; an EAGLE-3 drafter beside an idle rank too): each rank drafts what the
reference drafts for its own batch, and every rank's draft forwards share one DP view
(``num_tokens_across_dp``, graph mode), a rank without requests running dummy batches in lockstep
(a dense EAGLE-3 draft syncs nothing: each rank its own view, ``dense-draft-skips-the-dp-sync``).
Under a changed vllm-ascend (``MTP_BROKEN_VLLM_ASCEND``) the ranks run it too
(``broken_gate.apply_in_rank``); each DP break (``dp_breaks``) is seen failing here."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from sim import cli
from sim.impls.vllm_ascend.accepted import accepted_by
from sim.impls.vllm_ascend.data_parallel import DpCase, DpPool, DpRankResult, DraftForward, check_dp
from sim.ranks.pool import RankFailure
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.modes import USES_ASYNC_SCHEDULING, USES_KERNEL_BLOCKS, USES_VLLM_SCHEDULER
from tests.impls.vllm_ascend import broken_gate, dp_breaks
from tests.impls.vllm_ascend.cases import REST_OF_PATH, SETUP, VLLM_SCHEDULED_ON_RANKS, first_of_path, with_replay
from tests.properties.test_propose_loop import FAMILY_FIELDS, TYPICAL
from tests.properties.test_vllm_schedules import SCHEDULED_BY_VLLM
from tests.session_impls import impl_of

SMALL = dataclasses.replace(TYPICAL, seed=1, requests=(RequestSpec(0, 4, 4), RequestSpec(2, 2, 6)))
MODES = ("eager", "full")
FAMILIES = {"gqa": {}, **FAMILY_FIELDS}  # the draft layer's attention family: its builder's metadata
DENSE = {"eagle": {"method": "eagle"}, "eagle3": {"method": "eagle3"}}  # EAGLE heads: no experts, no DP sync
DRAFTS = {**FAMILIES, **DENSE}  # each family's MTP drafter, and the EAGLE heads (their dummy runs are their own)


def _ranks(device, accepted: tuple[str, ...] | None, size: int = 2) -> DpPool:
    """``size`` DP ranks accepting the session's divergences (the ``accepted`` fixture)."""
    if device.name != "sim":
        pytest.skip(f"data-parallel ranks of the vllm-ascend adapter run on the simulator (device {device.name})")
    return DpPool(size, accepted, case_timeout_s=120)


@pytest.fixture(scope="module")
def pool(device, accepted):
    ranks = _ranks(device, accepted)
    yield ranks
    ranks.close()


def _case(mode, *scenarios, setup=(SETUP,), attn="gqa", lmhead_tp=False, divergences=None) -> DpCase:
    ranks = (dataclasses.replace(s, graph_mode=mode, **DRAFTS[attn]) if s else None for s in scenarios)
    return DpCase.of(*ranks, setup=setup, lmhead_tp=lmhead_tp, divergences=divergences)


def _lm_head_peer(peer: str) -> Scenario | None:
    """The second rank beside ``TYPICAL`` under lm-head TP: idle, or busy serving the same model."""
    return dataclasses.replace(SMALL, seed=TYPICAL.seed) if peer == "busy" else None


def _agree(case: DpCase, pool, name: str) -> list[str]:
    """The ranks' problems, with the case's replay where there are some (the divergences the ranks
    accepted in it)."""
    case = accepted_by(case, pool.divergences)
    return with_replay(check_dp(case, pool), case, f"dp-{name}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attn", first_of_path(FAMILIES))
def test_dp_ranks_with_other_batches_draft_their_own_and_share_a_dp_view(pool, attn, mode):
    assert _agree(_case(mode, TYPICAL, SMALL, attn=attn), pool, f"other-batches-{attn}-{mode}") == []


@pytest.mark.parametrize("mode", MODES)
# EAGLE-1's dummy runs are EAGLE-3's path
@pytest.mark.parametrize("attn", first_of_path([d for d in DRAFTS if d != "eagle"]))
def test_an_idle_dp_rank_runs_dummy_batches_in_lockstep(pool, attn, mode):
    assert _agree(_case(mode, SMALL, None, attn=attn), pool, f"idle-rank-{attn}-{mode}") == []


@pytest.mark.parametrize("method", DENSE)
def test_an_eagle_drafter_syncs_nothing_with_its_dp_peers(pool, method):
    """dense-draft-skips-the-dp-sync: an EAGLE-1 or EAGLE-3 head has no experts, so its drafter issues no
    DP collective (the target's step still syncs): each rank drafts its own rows, told its own size for
    every rank; the same case held to the MTP drafter's spec (one synced view) fails."""
    from sim.impls.vllm_ascend.data_parallel import _dp_view_problem

    results = pool.run(_case("eager", TYPICAL, SMALL, attn=method))
    assert all(r.alone for r in results) and not any(r.problems for r in results)
    for r in results:
        assert not any("_propose" in site or "dummy_run" in site for sites in r.sites for site in sites), r.sites
    first = [r.steps[0][0] for r in results]  # each rank's first draft forward
    assert [f.across_dp for f in first] == [(f.rows,) * 2 for f in first] and first[0].rows != first[1].rows
    synced = [dataclasses.replace(r, alone=False) for r in results]
    assert "do not share one num_tokens_across_dp" in _dp_view_problem(0, synced, [r.steps[0] for r in results])


@pytest.mark.parametrize("mode", MODES)
def test_four_dp_ranks_two_idle_step_together(device, accepted, mode):
    """DP = 4: two ranks with other batches (one chunking a longer prompt), two without requests; every
    step's DP view is the four ranks' and each runs its own entry (padded to the largest, or its own).
    Then the same ranks with the lm head split over the four (one model: the seed of the first)."""
    ranks = _ranks(device, accepted, size=4)
    try:
        longer = dataclasses.replace(SMALL, seed=2, requests=(RequestSpec(0, 11, 5), RequestSpec(1, 3, 4)))
        case = _case(mode, TYPICAL, None, longer, None)
        assert _agree(case, ranks, f"four-ranks-{mode}") == []
        one_model = dataclasses.replace(longer, seed=TYPICAL.seed)
        case = _case(mode, TYPICAL, None, one_model, None, lmhead_tp=True)
        assert _agree(case, ranks, f"four-ranks-lmhead-tp-{mode}") == []
    finally:
        ranks.close()


@pytest.mark.parametrize("mode", MODES)
def test_dp_ranks_touch_no_stand_in(pool, mode):
    """No value of the ranks' runs comes from the fake ``torch_npu``'s mocks (each rank watches them)."""
    watch = ("tests.checks.stand_ins:watched_in_rank",)
    assert check_dp(_case(mode, TYPICAL, SMALL, setup=watch), pool) == []


def test_dp_ranks_with_the_lm_head_split_touch_no_stand_in(device, accepted):
    """The same with lm-head TP, on new ranks, so that its group is made while they watch. One call is
    allowed, named: the checkout's ``NPUCommunicator`` keeps ``torch.npu.current_device()`` as its device
    when the group is made, which only its point-to-point ``recv`` reads (lm-head TP gathers and
    exchanges on the group's process group, on the tensors' own device)."""
    watch = ("tests.checks.stand_ins:watched_in_rank", "torch.npucall.current_device()")
    ranks = _ranks(device, accepted)
    try:
        one_model = dataclasses.replace(SMALL, seed=TYPICAL.seed)
        assert check_dp(_case("eager", TYPICAL, one_model, setup=watch, lmhead_tp=True), ranks) == []
    finally:
        ranks.close()


BREAKS = {  # variant -> (its break, its mode, what the failure says)
    "dp-draft-runs-its-own-size": (dp_breaks.draft_runs_its_own_size, "eager", "AssertionError: 12 4"),
    # a collective whose sizes do not match: a gloo error, or gloo aborting the rank (SIGABRT)
    "dp-dummy-run-skips-the-sync": (dp_breaks.dummy_run_skips_the_dp_sync, "eager", "at DP step|exited with code"),
    # or, on v0.22.1rc, first the forced replay's KV writes outside the last call's slots (it reads the per-step
    # slot buffers: dummy-run-writes-kv-at-the-last-calls-slots tolerates the last call's only); on v0.21.0rc
    # its writes land at the last call's slots, tolerated as writes, and a later draft of that rank reads them
    "dp-dummy-replays-a-graph-whatever-its-peers-run": (
        dp_breaks.dummy_replays_a_graph_whatever_its_peers_run,
        "full",
        r"one num_tokens_across_dp and graph mode|a dummy run wrote KV at|request \d+: draft \d+ .*: got \d+",
    ),
}


@pytest.mark.parametrize("variant", sorted(BREAKS))
def test_each_dp_break_is_caught(pool, variant):
    """A changed vllm-ascend in each DP class fails: through vLLM's own check of the DP sizes
    (``DPMetadata.make``), naming the step and the collectives a rank met, or naming the forwards'
    DP views. The ranks undo it after the case (the pool serves the next unchanged)."""
    breaking, mode, said = BREAKS[variant]
    assert broken_gate.VARIANTS[variant][1] is breaking
    with pytest.raises((RankFailure, AssertionError), match=said):
        assert check_dp(_case(mode, TYPICAL, SMALL, setup=(SETUP, variant)), pool) == []


def test_a_pool_whose_ranks_failed_leaves_nothing_behind(device):
    """A rank killed in a broken collective cannot remove its temp files: the pool's folder, which
    holds them, goes when the pool closes."""
    ranks = _ranks(device, None)
    ranks.start()
    folder = Path(ranks.temp_dir)
    ranks.close()
    assert not folder.exists()


@pytest.mark.parametrize("lmhead_tp", [False, True])
def test_a_dp_case_file_replays_as_saved(tmp_path, lmhead_tp):
    for divergences in (None, (), (LOWERED_DEFECT,)):
        case = _case("full", TYPICAL, None, setup=(), lmhead_tp=lmhead_tp, divergences=divergences)
        path = case.save(tmp_path / "dp.json")
        assert DpCase.from_dict(json.loads(path.read_text())) == case


LOWERED_DEFECT = "padded-seq-lens-not-lowered"


def test_dp_ranks_accept_the_divergences_their_session_accepts(pool, request):
    """A session whose ``--divergences`` list no longer names ``LOWERED_DEFECT`` (fixed upstream) holds its
    DP ranks to the spec there: vllm-ascend with the fix (``broken_gate.FIXES``: ``seq-lens-lowered``)
    agrees, and vllm-ascend without it, which ranks accepting the defect model, fails."""
    ids = tuple(d.id for d in impl_of(request.node).divergences)
    if LOWERED_DEFECT not in ids:
        pytest.skip(f"{LOWERED_DEFECT} is not accepted in this session (its --divergences list)")
    dropped = tuple(i for i in ids if i != LOWERED_DEFECT)
    fixed = (SETUP, "seq-lens-lowered")
    assert _agree(_case("eager", TYPICAL, SMALL, setup=fixed, divergences=dropped), pool, "defect-dropped") == []
    assert _agree(_case("eager", TYPICAL, SMALL, divergences=ids), pool, "defect-accepted") == []
    held = check_dp(_case("eager", TYPICAL, SMALL, divergences=dropped), pool)
    assert held and "seq_len" in held[0], held


def test_a_dp_case_naming_no_divergence_of_the_implementation_is_refused_by_name(pool):
    with pytest.raises(RankFailure, match=r"'no-such-defect' is no divergence of vllm_ascend"):
        check_dp(_case("eager", TYPICAL, None, divergences=("no-such-defect",)), pool)


@pytest.mark.parametrize(
    ("data", "args", "said"),
    [
        ({"dp_ranks": [dataclasses.asdict(TYPICAL), {"seed": "x"}]}, [], "dp_ranks[1]: seed='x'"),
        ({"dp_ranks": [dataclasses.asdict(TYPICAL)]}, [], "a DP case has at least two ranks"),
        ({"dp_ranks": [None, None]}, [], "one of them with requests"),
        ({"dp_ranks": [dataclasses.asdict(TYPICAL), None]}, ["--impl", "core"], "DP ranks run vllm-ascend's drafter"),
        (
            {"dp_ranks": [dataclasses.asdict(TYPICAL), None], "divergences": "x"},
            [],
            "divergences='x': expected a list of the divergence ids",
        ),
    ],
)
def test_a_bad_dp_case_is_one_line_and_exit_2(tmp_path, capsys, data, args, said):
    path = tmp_path / "dp.json"
    path.write_text(json.dumps(data))
    assert cli.main(["replay", str(path), *args]) == 2
    assert said in capsys.readouterr().err


def test_ranks_at_different_collectives_in_a_step_are_named():
    """The per-step collective check on its own (two results made here, no ranks): equal totals, but
    step 0 of rank 1 met one collective fewer, as ranks whose calls paired across steps would."""
    view = [DraftForward(4, 4, (4, 4), "NONE")]
    ranks = [
        DpRankResult(
            0,
            steps=[view, view],
            dummy=[False, False],
            needed=[4, 4],
            sites=[["a", "b"], ["a", "b"]],
            own_steps=[None, None],
        ),
        DpRankResult(
            1,
            steps=[view, view],
            dummy=[True, True],
            needed=[1, 1],
            sites=[["a"], ["a", "b", "b"]],
            own_steps=[None, None],
        ),
    ]

    class Ranks:  # the pool's answer, as its ranks would send it
        size, divergences = 2, None

        def run(self, case):
            return ranks

    problems = check_dp(_case("eager", TYPICAL, None), Ranks())
    assert problems == ["DP step 0: the ranks issued different DP collectives: rank 0: ['a', 'b']; rank 1: ['a']"]


def test_a_drafter_that_syncs_nothing_must_run_its_own_rows():
    """The spec of drafters without DP collectives on its own (results made here): a rank with requests
    padded to a peer's size, or told another view than its own size, is named; a dummy's size is free."""
    from sim.impls.vllm_ascend.data_parallel import _dp_view_problem

    def results(rank0, rank1):
        return [
            DpRankResult(0, steps=[rank0], dummy=[False], needed=[4], own_steps=[2], alone=True),
            DpRankResult(1, steps=[rank1], dummy=[True], needed=[1], own_steps=[None], alone=True),
        ]

    own = [DraftForward(4, 4, (4, 4), "NONE"), DraftForward(2, 2, (4, 4), "NONE")]
    dummy = [DraftForward(6, 6, (6, 6), "NONE")] * 2
    ok = results(own, dummy)
    assert _dp_view_problem(0, ok, [r.steps[0] for r in ok]) is None
    padded = results([DraftForward(6, 6, (6, 6), "NONE"), DraftForward(2, 2, (6, 6), "NONE")], dummy)
    said = _dp_view_problem(0, padded, [r.steps[0] for r in padded])
    assert said.startswith(
        "DP step 0: rank 0 syncs nothing with its peers, so its forwards must be told [6, 6] and run [4, 2]"
    )
    told = results([own[0], DraftForward(2, 2, (2, 2), "NONE")], dummy)
    assert "rank 0 syncs nothing" in _dp_view_problem(0, told, [r.steps[0] for r in told])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("peer", first_of_path(["idle", "busy"], first=2))
def test_lmhead_tp_across_dp_ranks(pool, peer, mode):
    """vllm-ascend's lm-head TP over the DP ranks: every logits computation is a collective of both ranks
    (the checkout's all-gather and all-to-all over gloo), so both compute logits at the same rows, an idle
    rank in its dummy runs; each rank's drafts and metadata are still the reference's. The ranks serve one
    model (its seed), each its own requests."""
    other = _lm_head_peer(peer)
    case = _case(mode, TYPICAL, other, lmhead_tp=True)
    assert _agree(case, pool, f"lmhead-tp-{peer}-{mode}") == []


@REST_OF_PATH
@pytest.mark.parametrize("mode", MODES)
def test_lmhead_tp_across_dp_ranks_of_an_eagle_drafter(pool, mode):
    """The same with an EAGLE-3 drafter (a dense head: it syncs nothing with its peers, but every logits
    computation is still the lm-head TP group's collective), both ranks busy; its method's branches around
    lm-head TP (the sample rows' batch size) are EAGLE-1's too."""
    case = _case(mode, TYPICAL, _lm_head_peer("busy"), attn="eagle3", lmhead_tp=True)
    assert _agree(case, pool, f"lmhead-tp-eagle3-{mode}") == []


def test_lmhead_tp_across_ranks_of_other_models_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^lmhead_tp=True with the ranks' \(seed, vocab_size, hidden_size, method\)"):
        DpCase.of(TYPICAL, SMALL, lmhead_tp=True)


def test_lmhead_tp_sample_rows_unpadded_are_caught(pool):
    """A drafter that takes lm-head TP for off computes its draft logits at its own rows on each rank: the
    ranks' all-gather of the lm head meets other sizes, and the rank names the step it failed at."""
    variant = "dp-sample-rows-unpadded-under-lmhead-tp"
    case = _case("eager", TYPICAL, None, setup=(SETUP, variant), lmhead_tp=True)
    with pytest.raises((RankFailure, AssertionError), match=r"at DP step|exited with code"):
        assert check_dp(case, pool) == []


@pytest.mark.parametrize("peer", ["idle", "busy"])
def test_lm_head_logits_of_the_peer_rows_are_caught(pool, peer):
    """A logits processor that hands each rank its peer's rows under lm-head TP (every collective and
    shape as before): a rank's drafts are no longer the reference's, and the rank says which."""
    variant = "dp-lm-head-logits-of-the-peer-rows"
    other = _lm_head_peer(peer)
    case = _case("eager", TYPICAL, other, setup=(SETUP, variant), lmhead_tp=True)
    with pytest.raises((RankFailure, AssertionError), match=r"rank \d: iteration \d+, request \d+: draft \d+"):
        assert check_dp(case, pool) == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("peer", ["idle", "busy"])
def test_lm_head_tp_written_otherwise_passes(pool, peer, mode):
    """The control: lm-head TP whose logits join the vocabulary slices by an all-gather, each rank keeping
    its own rows (no all-to-all), is right, and every rank's drafts and metadata are the reference's."""
    other = _lm_head_peer(peer)
    case = _case(mode, TYPICAL, other, setup=(SETUP, "dp-lm-head-logits-gathered-whole"), lmhead_tp=True)
    assert _agree(case, pool, f"lmhead-tp-gathered-whole-{peer}-{mode}") == []


@USES_ASYNC_SCHEDULING
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("peer", ["idle", "busy"])
def test_dp_ranks_scheduling_asynchronously(pool, peer, mode):
    """Asynchronous scheduling on DP ranks: each busy rank's count copy, next-step input ids and corrections
    are compared as on one rank (``sim.oracle.next_step``), in lockstep with its peer (idle: dummy batches)."""
    ranks = [TYPICAL, SMALL if peer == "busy" else None]
    ranks = (dataclasses.replace(s, async_scheduling=True) if s else None for s in ranks)
    assert _agree(_case(mode, *ranks), pool, f"async-{peer}-{mode}") == []


@USES_KERNEL_BLOCKS
@pytest.mark.parametrize(("peer", "mode"), [("busy", "eager"), ("idle", "full")])  # each about 5 s of a worker
def test_dp_ranks_of_a_hybrid_target_over_kernel_blocks(pool, peer, mode):
    """A hybrid target's layout (blocks of 8 tokens, kernel blocks of 2: Qwen3.5's, served on DP ranks) on each
    rank: two busy ranks' runner tables of kernel blocks, or an idle rank's dummy batches and captures beside a
    busy one's replays, in lockstep."""
    ranks = [TYPICAL, SMALL if peer == "busy" else None]
    ranks = (dataclasses.replace(s, block_size=8, kernel_block_size=2) if s else None for s in ranks)
    assert _agree(_case(mode, *ranks), pool, f"kernel-blocks-{peer}-{mode}") == []


# Each DP rank's steps as its own vLLM scheduler makes them (vLLM's DP engines schedule each their own): one
# rank preempting on its 13 blocks, the other serving two requests on enough blocks
VLLM_PEER = dataclasses.replace(SCHEDULED_BY_VLLM, seed=1, kv_blocks=0, requests=SMALL.requests)


@USES_VLLM_SCHEDULER
@VLLM_SCHEDULED_ON_RANKS
def test_dp_ranks_each_scheduled_by_vllm(pool, asynchronous, mode):
    """vLLM's ``Scheduler`` (``AsyncScheduler``) on each DP rank: a rank whose requests are preempted and
    computed again steps, pads and syncs with its peer as on the loop's schedule, and drafts what the
    reference drafts for its own batch."""
    ranks = (dataclasses.replace(s, async_scheduling=asynchronous) for s in (SCHEDULED_BY_VLLM, VLLM_PEER))
    assert _agree(_case(mode, *ranks), pool, f"vllm-scheduled-{mode}") == []


def test_a_dp_case_of_more_ranks_than_the_pool_is_refused_by_name(pool):
    with pytest.raises(ValueError, match=r"^dp_ranks: 3 ranks' scenarios for a pool of 2 DP ranks"):
        check_dp(_case("eager", TYPICAL, SMALL, None), pool)


def test_an_idle_ranks_dummy_batch_is_the_workers():
    """An idle DP rank's dummy batch is what vllm-ascend's worker runs (``execute_dummy_batch``: ``_dummy_run``
    of its runner's ``decode_token_per_req``, on main of its ``uniform_decode_query_len``), which the runner's
    constructor makes one uniform decode of 1 + K tokens; the view holds the same (it held 1 once, and the
    idle ranks drafted a batch of one token the worker never runs)."""
    import ast

    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend.build import configured

    worker = Path(import_ascend("vllm_ascend").__file__).parent / "worker" / "worker.py"
    (method,) = [n for n in ast.walk(ast.parse(worker.read_text())) if getattr(n, "name", "") == "execute_dummy_batch"]
    source = ast.unparse(method)
    assert "_dummy_run(" in source and ("decode_token_per_req" in source or "uniform_decode_query_len" in source)
    runner = configured(3, 16, 64, 8).runner
    assert runner.decode_token_per_req == runner.uniform_decode_query_len == 4


# vllm-ascend's balance scheduling on the DP ranks (``Scenario.scheduler = "balance"``): rank 0 runs its
# maximum of two requests from the first step, so rank 1's requests wait (its steps dummy batches beside rank
# 0's) until a gather finds rank 0 below it. The prompts' lengths leave a first scheduling's drafts within
# its blocks (1 or 2 past a multiple of the block size, K = 3), where 0.23.0's BalanceScheduler gives no
# lookahead slots (pinned in test_ascend_schedulers.py)
BALANCE_BUSY = Scenario(
    num_spec_tokens=3,
    max_model_len=40,
    token_budget=32,
    max_num_reqs=2,
    accept="greedy",
    scheduler="balance",
    requests=(RequestSpec(0, 9, 10), RequestSpec(0, 6, 14), RequestSpec(1, 5, 6)),
)
BALANCE_HELD = dataclasses.replace(BALANCE_BUSY, seed=1, requests=(RequestSpec(1, 10, 6), RequestSpec(2, 13, 5)))


@USES_VLLM_SCHEDULER
@VLLM_SCHEDULED_ON_RANKS
def test_dp_ranks_hold_admissions_for_balance(pool, asynchronous, mode):
    """Each rank's BalanceScheduler all-gathers the ranks' running counts every DP step; while rank 0 runs its
    maximum, rank 1 admits none of its requests and runs dummy batches in lockstep; then both draft what the
    reference drafts for their batches."""
    ranks = (dataclasses.replace(s, async_scheduling=asynchronous) for s in (BALANCE_BUSY, BALANCE_HELD))
    events = Counter()
    case = accepted_by(_case(mode, *ranks), pool.divergences)
    assert with_replay(check_dp(case, pool, events), case, f"dp-balance-{mode}") == []
    assert events["admissions held for balance"] > 0, f"no rank held an admission for balance: {dict(events)}"


@USES_VLLM_SCHEDULER
def test_a_balance_schedule_without_lookahead_slots_is_caught(pool):
    """The balance case under a BalanceScheduler whose copy gives its running requests no lookahead slots
    (``dp_breaks.balance_schedule_without_lookahead``): a rank stops at the step, naming the blocks short."""
    assert (
        broken_gate.VARIANTS["dp-balance-schedule-without-lookahead"][1] is dp_breaks.balance_schedule_without_lookahead
    )
    case = _case("eager", BALANCE_BUSY, BALANCE_HELD, setup=(SETUP, "dp-balance-schedule-without-lookahead"))
    with pytest.raises(
        RankFailure, match=r"SchedulerDefect: r\d+: vllm-ascend's BalanceScheduler .* handed it \d+ blocks"
    ):
        check_dp(case, pool)
