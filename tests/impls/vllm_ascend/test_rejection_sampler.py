"""vllm-ascend's rejection sampler against the from-scratch reference (``sim.oracle.rejection``).

What it decides is what the drafter is handed next: how many drafts each request keeps and the
token it continues from. Both of its paths run, its Triton kernels (interpreted, every launch
guarded by ``kit.kernel_bounds``) and its torch fallback, on batches hypothesis draws
(``tests.strategies.rejection``):

- greedy requests get exactly the reference's rows, in all-greedy and mixed batches;
- random requests get rows a rejection sampler can give (the drafts' prefix, one more id, then
  placeholders), and, over many requests with a fixed seed, the first output id is distributed as
  the target's distribution and the first draft kept as often as the standard rule keeps it;
- no kernel reads or writes outside its arguments, except the known defect
  ``rejection-kernels-read-before-their-buffer``, tolerated exactly and pinned here.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend import world
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import branch_divergences, generation, rejection
from sim.oracle.rejection import Verification
from tests.checks.known_defects import pin
from tests.checks.modes import USES_REDUCE_SAMPLE
from tests.checks.rejection_checks import DRAFTERS, FIXED, check_first_ids, check_rows
from tests.impls.vllm_ascend import broken_gate
from tests.impls.vllm_ascend import defect_fixes as fixes
from tests.impls.vllm_ascend import rejection_breaks as breaks
from tests.session_impls import impl_of
from tests.strategies.rejection import VOCAB, verifications

PATHS = [pytest.param(True, id="triton"), pytest.param(False, id="torch-fallback")]
DEFECT = rejection.DEFECT


@pytest.fixture(scope="module")
def where():
    """The proposer's device, with vllm-ascend's config initialised (the sampler reads it)."""
    world.vllm_config(32)
    return world.build_device()


def pin_reads(sampled) -> None:
    """The defect's reads, where a kernel that made them ran (all-greedy one-draft batches run one that never did)."""
    if sampled.tolerated_could_show:
        seen = sampled.tolerated_seen
        pin(DEFECT, bool(seen), not seen, sorted(map(str, seen)))


@pytest.mark.order(0)
@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_batches_match_the_reference(where, name):
    torch.manual_seed(0)
    sample_and_check(where, True, FIXED[name])


def sample_and_check(where, triton: bool, v: Verification) -> None:
    sampled = rejection.sample(v, where, triton)
    check_rows(v, sampled.rows)
    if triton:
        pin_reads(sampled)


@pytest.mark.parametrize("triton", PATHS)
@given(v=verifications(greedy=True))
def test_greedy_rows_are_the_agreeing_prefix_then_the_bonus(where, triton, v):
    sample_and_check(where, triton, v)


@pytest.mark.parametrize("triton", PATHS)
@given(v=verifications(greedy=None))
def test_a_mixed_batch_keeps_greedy_rows_exact_and_random_rows_well_formed(where, triton, v):
    sample_and_check(where, triton, v)


@pytest.mark.parametrize("triton", PATHS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_random_first_ids_follow_the_target_distribution(where, triton, drafter):
    check_first_ids(lambda v: rejection.sample(v, where, triton), drafter)


def test_the_kernels_read_before_their_cumulative_counts(where):
    """``rejection-kernels-read-before-their-buffer``: for request 0 each kernel loads element -1 of its
    cumulative draft counts (``tl.where(offset == 0, 0, tl.load(ptr + offset - 1, mask))`` evaluates
    both operands; the recovered-token kernel loads it unmasked), which on an NPU reads whatever is
    mapped before the tensor and sometimes faults (vllm-ascend #14902; fixed upstream in #16215).
    Untolerated, the guard stops the launch, naming the kernel, the argument and the offset."""
    v = FIXED["mixed"]
    sampled = rejection.sample(v, where)
    assert sampled.tolerated_could_show
    pin_reads(sampled)
    if sampled.tolerated_seen:
        with pytest.raises(kernel_bounds.KernelOutOfBounds, match=r"_ptr\[-1\] .*outside its 2 elements"):
            rejection.sample(v, where, tolerate=False)


def test_the_fix_masks_every_such_read_and_changes_no_row(where, monkeypatch):
    """``predecessor-loads-masked`` (the fix of #14902 / #16215, ``defect_fixes``): the same rows, and no
    kernel reads before its counts, untolerated. (The whole gate on it ends with the fixed line.)"""
    if DEFECT not in branch_divergences.in_force(generation.name()).DIVERGENCES:
        pytest.skip(f"{DEFECT}: not this checkout's (generation {generation.name()}), its fix edits lines it has not")
    cases = [
        Verification(((1, 2), (3,)), torch.eye(VOCAB)[[1, 5, 3]], (4, 6), (0.0, 1.0), 2),
        Verification(((1, 2), (3,), ()), torch.eye(VOCAB)[[1, 2, 3]], (4, 6, 7), (1.0, 0.0, 1.0), 2),
    ]
    before = [rejection.sample(v, where).rows for v in cases]
    broken_gate.apply("predecessor-loads-masked", monkeypatch)
    for v, rows in zip(cases, before):
        sampled = rejection.sample(v, where)
        assert sampled.tolerated_could_show and not sampled.tolerated_seen  # the kernels ran, read nothing before
        check_rows(v, rejection.sample(v, where, tolerate=False).rows)  # nothing let through
        check_rows(v, sampled.rows)
        assert [r for r, t in zip(sampled.rows, v.temperature) if t == 0] == [
            r for r, t in zip(rows, v.temperature) if t == 0
        ]


# Each property seen failing on a broken sampler (``rejection_breaks``): stop at the first failing example.
FIRST_FAILURE = settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _fails(where, greedy, match: str, exc=AssertionError) -> None:
    @FIRST_FAILURE
    @given(v=verifications(greedy=greedy))
    def prop(v):
        sample_and_check(where, True, v)

    with pytest.raises(exc, match=match):
        prop()


@pytest.mark.parametrize(
    ("breaking", "greedy", "match"),
    [
        pytest.param(
            breaks.keeps_the_first_mismatch,
            True,
            r"temperature 0.0\): got \[.*\], want \[",
            id="keeps-the-first-mismatch",
        ),
        pytest.param(
            breaks.bonus_after_a_rejection,
            None,
            r"temperature 1.0\): (kept ids|\d+ ids for)",
            id="bonus-after-a-rejection",
        ),
    ],
)
def test_a_wrong_row_fails_naming_the_request(where, monkeypatch, breaking, greedy, match):
    module = import_ascend(rejection.MODULE)
    monkeypatch.setattr(module, "rejection_sample", breaking(module.rejection_sample))
    _fails(where, greedy, match)


def test_accepting_every_random_draft_fails_the_law(where, monkeypatch):
    module = import_ascend(rejection.MODULE)
    monkeypatch.setattr(module, "rejection_sample", breaks.accepts_every_draft(module.rejection_sample))
    with pytest.raises(AssertionError, match=r"first ids \{.*chi2"):
        check_first_ids(lambda v: rejection.sample(v, where), "point-mass")


def test_a_kernel_lane_past_the_batch_is_named(where, monkeypatch):
    breaks.greedy_lanes_past_the_batch(monkeypatch)
    _fails(
        where,
        True,
        r"rejection_greedy_sample_triton: (load of cu_num_draft_tokens_ptr|store of output_token_ids_ptr)\[\d+\]",
        kernel_bounds.KernelOutOfBounds,
    )


RUNNER_TOP_K = "reduce-sample-top-k-of-the-requests-under-a-slice"
# a batch's requests' top-ks (vLLM's top_k_cpu: a request without top-k holds the vocabulary, 128) on a TP
# rank of 64 columns, and the top-k every rank's candidates need: the smaller of the largest and 64
TOP_K_BATCHES = {"one-request-above-a-slice": ((100,), 64), "a-plain-request-beside-top-k-20": ((20, 128), 64)}


def _runner_top_k(top_ks: tuple[int, ...]):
    """What the runner prepares its sampler with for ``top_ks`` on a rank of 64 columns, or what it raised."""
    try:
        return rejection.runner_top_k(top_ks, 64)
    except ValueError as nothing:
        return f"raised {nothing}"


@USES_REDUCE_SAMPLE
def test_the_runner_prepares_the_sampler_for_every_requests_top_k(request):
    """``RUNNER_TOP_K``: the runner's ``_sample`` (the checkout's, compiled from its source) hands its
    rejection sampler a top-k too small for a request of a larger one, or raises where every request's is
    at least the rank's columns (None would be every candidate: enough). Accepted, the pin records what
    the batches got: the defect's (a raise, or less than needed) or the spec's (fixed); dropped from the
    session's list, the spec alone."""
    got = {name: _runner_top_k(top_ks) for name, (top_ks, _) in TOP_K_BATCHES.items()}
    short = {
        name: got[name]
        for name, (_, needed) in TOP_K_BATCHES.items()
        if got[name] is not None and (isinstance(got[name], str) or got[name] < needed)
    }
    if not any(d.id == RUNNER_TOP_K for d in impl_of(request.node).divergences):
        assert short == {}, got
        return
    pin(RUNNER_TOP_K, present=bool(short), fixed=not short, detail=got)


@USES_REDUCE_SAMPLE
def test_the_runner_top_k_fixed_meets_the_spec(monkeypatch):
    """The fix (``broken_gate.FIXES``): the largest top-k of the batch, capped at the rank's columns."""
    name = "runner-top-k-of-every-request"
    assert broken_gate.FIXES[name][1][0][1] is fixes.runner_top_k_of_every_request
    broken_gate.apply(name, monkeypatch)
    assert {n: _runner_top_k(ks) for n, (ks, _) in TOP_K_BATCHES.items()} == {
        n: needed for n, (_, needed) in TOP_K_BATCHES.items()
    }
