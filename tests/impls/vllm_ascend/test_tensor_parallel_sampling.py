"""vllm-ascend's rejection sampler on two tensor-parallel ranks under ``enable_reduce_sample``, each rank holding
its slice of the target's logits (``sim.impls.vllm_ascend.tensor_parallel``: ``TpSampleCase``): greedy rows
exactly the reference's; random rows well formed, alike on every rank, their first ids draws of the target's
distribution; beside a top-k request, with the top-k the runner's ``_sample`` prepares. The known defects
``reduce-sample-ids-of-a-short-last-shard`` and ``reduce-sample-top-k-of-the-requests-under-a-slice`` are
pinned against the spec, and their fixes meet it; each sampler break on TP ranks is seen failing here."""

from __future__ import annotations

import pytest
import torch

from sim.impls.vllm_ascend import branch_divergences, generation
from sim.impls.vllm_ascend.branch_divergences import NO_TOP_K_RAISES
from sim.impls.vllm_ascend.tensor_parallel import (
    REDUCE_SAMPLE_DEFECT,
    TpSampleCase,
    check_tp_sample,
    reduce_sample_report,
    sample_problems,
)
from sim.oracle.rejection import Verification
from sim.ranks.pool import RankFailure
from tests.checks.known_defects import pin
from tests.checks.modes import USES_REDUCE_SAMPLE
from tests.checks.rejection_checks import first_ids_problem
from tests.impls.vllm_ascend import broken_gate, tp_breaks
from tests.impls.vllm_ascend.cases import FIRST_OF_PATH, REST_OF_PATH, SETUP, WHOLE_SLICES
from tests.session_impls import impl_of

WATCH = ("tests.checks.stand_ins:watched_in_rank",)  # each rank watches the stand-ins
pytestmark = USES_REDUCE_SAMPLE


@pytest.fixture
def pool(tp_pool):
    return tp_pool


MASS = (10, 20, 30, 40, 70, 80, 90, 95)  # four ids in each rank's slice (of 96 ids or of 128)
MASS_LOGITS = (2.0, 0.5, 1.0, 1.5, -1.0, 0.0, 0.8, -0.5)


def _random_verification(vocab: int, n: int = 300) -> tuple[Verification, torch.Tensor]:
    """``n`` one-draft random requests (temperature 1) whose target puts its mass on ``MASS``, each drafting
    an id it gives none (so it is rejected, and the first output id is a draw of the target's distribution),
    and that distribution."""
    logits = torch.full((vocab,), -40.0)
    logits[list(MASS)] = torch.tensor(MASS_LOGITS)
    q = torch.zeros(vocab)
    q[list(MASS)] = torch.tensor(MASS_LOGITS).softmax(-1)
    return Verification(((3,),) * n, logits.expand(n, vocab).contiguous(), (0,) * n, (1.0,) * n, 1), q


NO_TOP_K = NO_TOP_K_RAISES.id
TOP_K_OF_NONE = "topk(): argument 'k' must be int, not NoneType"  # NO_TOP_K's crash, on every rank


def _accepted(request, defect: str) -> bool:
    return any(d.id == defect for d in impl_of(request.node).divergences)


def _random_rows(pool, vocab: int, setup=(SETUP,)) -> tuple[list[str], list[list[int]], torch.Tensor]:
    """The ranks' problems with a random batch over ``vocab`` ids, none with a top-k, rank 0's rows, and the
    target's distribution."""
    v, q = _random_verification(vocab)
    case = TpSampleCase(v, setup=setup, seed=7)
    results = pool.run(case)
    return sample_problems(case, results), results[0].rows, q


def _plain_random_rows(request) -> None:
    """Skips the calling test where random rows without a top-k crash the sampler (``NO_TOP_K`` accepted):
    its pin runs them."""
    if _accepted(request, NO_TOP_K):
        pytest.skip(
            f"{NO_TOP_K}: random requests without a top-k under reduce sampling raise on this checkout "
            "(test_random_rows_on_tp_ranks_are_draws_of_the_targets_distribution pins it)"
        )


@FIRST_OF_PATH  # the random rows run no drafter, and a break there shows in seconds
def test_random_rows_on_tp_ranks_are_draws_of_the_targets_distribution(pool, request):
    """Random requests under reduce sampling: each rank's candidates and their vocabulary ids gathered over
    the ranks (``apply_sampling_constraints``), every rank draws the same rows, and the first output ids
    follow the target's distribution. Where the session accepts ``NO_TOP_K`` (v0.20.2rc), these requests,
    none with a top-k, make every rank raise: the pin records that crash, or rows that meet the spec (fixed)."""
    _random_rows_pinned(pool, WHOLE_SLICES, NO_TOP_K if _accepted(request, NO_TOP_K) else None, TOP_K_OF_NONE)


def _verification(vocab: int, num_reqs: int = 12, k: int = 3, seed: int = 0) -> Verification:
    """A greedy verification batch over ``vocab`` ids: random target logits, each request's drafts the
    target's argmax up to one that is not (at a position of its own, or none), so rows end everywhere."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(num_reqs * k, vocab, generator=g)
    best = logits.argmax(-1).view(num_reqs, k)
    drafts = tuple(
        tuple(int(t) if i != r % (k + 1) else (int(t) + 1) % vocab for i, t in enumerate(best[r]))
        for r in range(num_reqs)
    )
    bonus = tuple(int(t) for t in torch.randint(vocab, (num_reqs,), generator=g))
    return Verification(drafts, logits, bonus, (0.0,) * num_reqs, k)


@FIRST_OF_PATH
@pytest.mark.parametrize("vocab", [WHOLE_SLICES, 96])
def test_the_rejection_sampler_on_tp_ranks_reduces_the_targets_slices(pool, vocab, defect_accepted):
    """vllm-ascend's rejection sampler under ``enable_reduce_sample``, each rank its slice of the target's
    logits: every rank's greedy rows are the reference's; on 96 ids, where the session accepts the known
    defect (the same arithmetic as the drafter's, ``reduce-sample-ids-of-a-short-last-shard``), the pin
    records whether they are the defect's ids' rows or the spec's (fixed), and either else fails."""
    case = TpSampleCase(_verification(vocab), setup=(SETUP,))
    report = reduce_sample_report(vocab, 2)
    spec = check_tp_sample(case, pool)
    if report is None or not defect_accepted:
        assert spec == []
        return
    shown = check_tp_sample(case, pool, report)
    pin(REDUCE_SAMPLE_DEFECT, present=shown == [], fixed=spec == [], detail=spec + shown)


@FIRST_OF_PATH
def test_random_rows_over_a_short_last_shard_gather_candidates_of_other_widths(pool, defect_accepted, request):
    """``reduce-sample-ids-of-a-short-last-shard`` in the random path: each rank gathers as many candidates
    as its logits have columns, and on 96 ids the last rank has 32 to the first's 64, so the ranks'
    all-gather of the candidates mismatches (gloo aborts; on an NPU, HCCL's collective of unequal sizes).
    Accepted, the pin records that mismatch (the defect), or rows that are draws of the target's
    distribution (the spec: fixed); dropped from the session's list, the case is held to the spec."""
    _plain_random_rows(request)
    _random_rows_pinned(pool, 96, REDUCE_SAMPLE_DEFECT if defect_accepted else None, CANDIDATES_GATHER)


def _random_rows_pinned(pool, vocab: int, defect: str | None, crash: str) -> None:
    """The random rows over ``vocab`` ids on the TP ranks, held to the spec (draws of the target's
    distribution, every rank the same); with ``defect`` accepted, its pin records the ranks failing at
    ``crash`` (the defect; or gloo aborting a rank in that collective, SIGABRT, where that rank's end is
    the first the pool sees) or rows that meet the spec (fixed), and anything else fails."""
    if defect is None:
        problems, rows, q = _random_rows(pool, vocab)
        assert problems == [], problems
        assert first_ids_problem(rows, q) is None, first_ids_problem(rows, q)
        return
    try:
        problems, rows, q = _random_rows(pool, vocab)
    except RankFailure as failure:
        assert crash in str(failure) or "exited with code -6" in str(failure), failure
        pin(defect, present=True, fixed=False)
    else:
        problems.append(first_ids_problem(rows, q))
        pin(defect, present=False, fixed=problems == [None], detail=problems)


TOP_K_DEFECT = "reduce-sample-top-k-of-the-requests-under-a-slice"


def _top_k_batch(pool, setup=(SETUP,), n: int = 300) -> tuple[list[int], float, float, bool]:
    """``n`` one-draft random requests over 128 ids scored on the ranks, alternately of top-k 20 and without
    one, the target's logits spread (a fixed draw of N(0, 1)): the top-k requests' first ids outside the
    target's 20 best (the spec allows none), the share of the plain requests' first ids outside every
    rank's 20 best, the target's mass there, and whether the share is that mass's (within 4 sigma: the
    plain requests draw from the whole distribution)."""
    logits = torch.randn(WHOLE_SLICES, generator=torch.Generator().manual_seed(3))
    top_k = tuple(20 if r % 2 == 0 else WHOLE_SLICES for r in range(n))
    v = Verification(((0,),) * n, logits.expand(n, WHOLE_SLICES).contiguous(), (0,) * n, (1.0,) * n, 1, None, top_k)
    case = TpSampleCase(v, setup=setup, seed=7)
    results = pool.run(case)
    assert sample_problems(case, results) == []
    first = [row[0] for row in results[0].rows]
    best = set(logits.topk(20).indices.tolist())
    ranks_best = {i + start for start in (0, 64) for i in logits[start : start + 64].topk(20).indices.tolist()}
    plain = first[1::2]
    share = sum(t not in ranks_best for t in plain) / len(plain)
    mass = float(logits.softmax(-1)[[i for i in range(WHOLE_SLICES) if i not in ranks_best]].sum())
    whole = abs(share - mass) < 4 * (mass * (1 - mass) / len(plain)) ** 0.5
    return [t for t in first[::2] if t not in best], share, mass, whole


@REST_OF_PATH
def test_random_rows_beside_a_top_k_request_draw_from_the_whole_distribution(pool, request):
    """``TOP_K_DEFECT`` where it lands: a top-k 20 request's draws lie in the target's 20 best, and a plain
    request beside it draws from the whole distribution (its share outside every rank's 20 best within 4
    sigma of the target's mass there); with the runner's prepared top-k of 20, each rank offers its 20 best
    only, and that share is 0 (the defect's). Accepted, the pin records which; dropped, the spec alone."""
    stray, share, mass, whole = _top_k_batch(pool)
    assert stray == [], f"top-k 20 requests drew {stray}, outside the target's 20 best"
    if not any(d.id == TOP_K_DEFECT for d in impl_of(request.node).divergences):
        assert whole, f"plain requests: {share:.3f} of their draws outside the ranks' 20 best, the target {mass:.3f}"
        return
    pin(TOP_K_DEFECT, present=share == 0, fixed=whole, detail=(share, mass))


def test_the_runner_top_k_fix_draws_from_the_whole_distribution(pool):
    """With ``runner-top-k-of-every-request`` in the ranks, the plain requests draw from the whole distribution."""
    stray, share, mass, whole = _top_k_batch(pool, setup=(SETUP, "runner-top-k-of-every-request"))
    assert stray == [] and whole, (stray, share, mass)


CANDIDATES_GATHER = "apply_sampling_constraints > _apply_top_k_top_p"  # the collective the ranks mismatch at


def test_random_candidates_that_lose_their_slices_offsets_are_caught(pool, request):
    """The candidates' ids reported by their index in each rank's slice: the draws past the first slice come
    out as ids the target gives no mass."""
    _plain_random_rows(request)
    variant = "tp-random-candidates-of-the-local-slice"
    assert broken_gate.VARIANTS[variant][1] is tp_breaks.candidate_ids_of_the_local_slice
    problems, rows, q = _random_rows(pool, WHOLE_SLICES, setup=(SETUP, variant))
    assert problems == [] and "where the target puts no mass" in first_ids_problem(rows, q)


def test_a_verification_that_loses_its_slices_offsets_is_caught(pool):
    """The rejection sampler's reduce-sample greedy reporting each rank's local index fails, naming a request."""
    variant = "tp-verify-ids-of-the-local-slice"
    assert broken_gate.VARIANTS[variant][1] is tp_breaks.draft_ids_of_the_local_slice
    problems = check_tp_sample(TpSampleCase(_verification(WHOLE_SLICES), setup=(SETUP, variant)), pool)
    assert any("request" in p and "want" in p for p in problems), problems


def test_the_samplers_batches_on_tp_ranks_touch_no_stand_in(pool, request):
    """No row of the rejection sampler's greedy and random batches on the ranks comes from the fake
    ``torch_npu``'s mocks (each rank watches them)."""
    assert check_tp_sample(TpSampleCase(_verification(WHOLE_SLICES), setup=WATCH), pool) == []
    _plain_random_rows(request)
    assert check_tp_sample(TpSampleCase(_random_verification(WHOLE_SLICES, 12)[0], setup=WATCH), pool) == []


def test_the_fix_of_the_short_last_shard_meets_the_spec_in_the_sampler(pool, request):
    """``reduce-sample-ids-from-the-slice-start`` (``broken_gate.FIXES``) in the ranks: the target's greedy rows
    and its random requests' draws on 96 ids are the spec's."""
    setup = (SETUP, "reduce-sample-ids-from-the-slice-start")
    assert check_tp_sample(TpSampleCase(_verification(96), setup=setup), pool) == []
    _plain_random_rows(request)
    problems, rows, q = _random_rows(pool, 96, setup=setup)
    assert problems == [] and first_ids_problem(rows, q) is None, (problems, first_ids_problem(rows, q))


TORCH_PATH_DEFECT = "reduce-sample-top-k-of-a-slice-or-more-dropped"
TORCH_PATH = "tests.impls.vllm_ascend.device_paths:pytorch_top_k_top_p"  # the sampler of other Ascend devices
TOP_K_REQUESTS = 200


def _strays_of_a_top_k_of_a_rank_slice(pool, *fixes: str, n: int = TOP_K_REQUESTS) -> tuple[int, float]:
    """``n`` one-draft random requests of top-k 64 over 128 ids (a rank's whole slice) on the sampler's torch
    path, with the runner's top-k fix in the ranks and ``fixes``: their first ids outside the target's 64 best
    (the spec allows none), and the target's mass there."""
    logits = torch.randn(WHOLE_SLICES, generator=torch.Generator().manual_seed(3))
    k = WHOLE_SLICES // 2
    v = Verification(((0,),) * n, logits.expand(n, WHOLE_SLICES).contiguous(), (0,) * n, (1.0,) * n, 1, None, (k,) * n)
    case = TpSampleCase(v, setup=(TORCH_PATH, "runner-top-k-of-every-request", *fixes), seed=7)
    results = pool.run(case)
    assert sample_problems(case, results) == []
    best = set(logits.topk(k).indices.tolist())
    mass = float(logits.softmax(-1)[[i for i in range(WHOLE_SLICES) if i not in best]].sum())
    return sum(row[0] not in best for row in results[0].rows), mass


@REST_OF_PATH
def test_a_top_k_of_a_slice_or_more_on_the_torch_path_follows_the_defect_or_the_spec(pool, request):
    """``TORCH_PATH_DEFECT``: on the devices whose sampler is its torch code, a top-k 64 request over 128 ids
    on 2 ranks keeps every candidate, and draws outside its 64 best as often as the target puts mass there
    (within 4 sigma); the spec, never. Accepted, the pin records which; dropped, the spec alone."""
    strays, mass = _strays_of_a_top_k_of_a_rank_slice(pool)
    n = TOP_K_REQUESTS
    if not any(d.id == TORCH_PATH_DEFECT for d in impl_of(request.node).divergences):
        assert strays == 0, f"top-k 64 requests drew {strays} of {n} first ids outside their 64 best"
        return
    dropped = abs(strays / n - mass) < 4 * (mass * (1 - mass) / n) ** 0.5
    pin(TORCH_PATH_DEFECT, present=strays > 0 and dropped, fixed=strays == 0, detail=(strays, mass))


@REST_OF_PATH
def test_the_torch_paths_top_k_fix_keeps_a_top_k_of_a_slice_or_more(pool):
    """With the top-k counted over the gathered candidates (``torch-path-top-k-over-the-candidates``), no
    draw leaves the request's 64 best."""
    if TORCH_PATH_DEFECT not in branch_divergences.in_force(generation.name()).DIVERGENCES:
        pytest.skip(
            f"{TORCH_PATH_DEFECT}: not this checkout's (generation {generation.name()}), its fix edits lines it has not"
        )
    strays, mass = _strays_of_a_top_k_of_a_rank_slice(pool, "torch-path-top-k-over-the-candidates")
    assert strays == 0, f"the fix: {strays} draws outside the 64 best (the target's mass there {mass:.3f})"
