"""Step 4: vLLM's decode kernels and compute_slot_mappings, with vllm-ascend's metadata build and host
lengths (what its attention reads), against the core: the ops, and what the propose loop's forwards saw."""

from __future__ import annotations

from hypothesis import given, settings

from sim.impls.vllm_ascend_mrv2 import build
from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Proposer
from sim.oracle import reference
from sim.oracle.cases import BatchCase, RequestCase, to_batch
from sim.serving.checker import DEFECT
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks import core_checks
from tests.checks.known_defects import pin
from tests.impls.suites import CPU
from tests.impls.vllm_ascend_mrv2.cases import OPS, clamped, only_where_it_is, rules, steps
from tests.impls.vllm_mrv2.cases import decode_case
from tests.strategies.batches import batch_cases


def seen_by_attention(case: BatchCase, device) -> list[list[int]]:
    """The seq_lens each forward of the whole propose loop handed attention (steps 1..K)."""
    scenario = Scenario(num_spec_tokens=case.config.num_spec_tokens, block_size=4, max_model_len=64,
                        requests=(RequestSpec(0, 4, 4),))  # fmt: skip
    proposer = AscendMrv2Proposer(case.config, build_models(scenario, CPU)[0], device)
    proposer.record()
    proposer.propose(*to_batch(case, CPU, padded=True))
    return [rec.seq_lens.tolist() for rec in proposer.trace]


@settings(max_examples=25)  # of the ci profile's 200: the env's budget (tox.ini)
@given(case=batch_cases())
def test_overflow_clamp_divergence(case):
    """overflow-clamp: every step's position advances from the last accepted one and stops at
    max_model_len - 1, and its slot is that position's: an overflowing step writes KV (slot >= 0) where
    the core sends it to position 0 and slot -1; below max_model_len the two agree."""
    mml = case.config.max_model_len
    got, prepared = steps(case)
    accepted = [s - r for s, r in zip(prepared.first.seq_lens.tolist(), prepared.first.num_rejected.tolist())]
    for j, (positions, _, slots) in enumerate(got, start=2):
        assert (positions, slots) == clamped(case, accepted, j)
        core = reference.step(case, j)
        for r, a in enumerate(accepted):
            over = a - 1 + j - 1 >= mml
            assert (positions[r] == core.positions[r] and slots[r] == core.slot_mapping[r]) != over
            assert slots[r] >= 0


@settings(max_examples=25)  # of the ci profile's 200: the env's budget (tox.ini)
@given(case=batch_cases())
def test_steps_match_the_reference_under_its_rules(case):
    """Every step's positions, host seq_lens and slots equal the reference's under the generation's rules."""
    got, _ = steps(case)
    fixes = [fix for _, fix in core_checks.alternatives_of(OPS, case, True, rules())]  # a known defect fixed
    for j, meta in enumerate(got, start=2):
        want = [reference.step(case, j, True, r) for r in (rules(), *fixes)]
        assert meta in [(w.positions, w.seq_lens, w.slot_mapping) for w in want], (j, meta, want[0])


def test_host_seq_lens_not_lowered(device):
    """host-seq-lens-not-lowered: a request that verified 3 drafts and accepted 1 (seq_len 14, 2 rejected)
    starts its later steps from the host's 14, not the accepted 12: the ops' base, and on 0.23.0 step 2's
    attention (14 + 1, where the core's is 13); on main the batch's bound (14 + K, where 12 + K)."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    got, prepared = steps(case)
    core = reference.step(case, 2)
    assert prepared.first.accepted_seq_lens.tolist() == [14] != [12]
    assert core.seq_lens == [13]
    step_two = 15 if rules().step_seq_lens == "advance-twice" else 14 + 3
    spec = 13 if rules().step_seq_lens == "advance-twice" else 12 + 3  # the same rules, lowered
    assert got[0][1] in ([step_two], [spec])  # the ops' step, from the intermediate the loop may still lower
    seen = seen_by_attention(case, device)[1]
    pin("host-seq-lens-not-lowered", seen == [step_two], seen == [spec], f"step 2 attends with {seen}")


def test_host_seq_lens_advanced_twice(device):
    """host-seq-lens-advanced-twice (0.23.0): a request with all 4 drafts accepted (seq_len 15, nothing
    rejected, so not-lowered plays no part): step j attends with 15 + 2j - 3, twice the core's advance
    from step 3 on (15 + j - 1), in the ops and in the propose loop's forwards."""
    only_where_it_is("host-seq-lens-advanced-twice")
    case = decode_case(max_model_len=64, num_computed=10, k=4, accepted=4)
    got, _ = steps(case)
    spec = [reference.step(case, j).seq_lens for j in (2, 3, 4)]
    assert spec == [[16], [17], [18]]
    seen = [[seq for _, seq, _ in got], seen_by_attention(case, device)[1:]]  # the ops', the loop's forwards'
    twice = [[16], [18], [20]]
    if pin("host-seq-lens-advanced-twice", seen == [twice] * 2, seen == [spec] * 2, f"{seen}") == DEFECT:
        runner = build.speculator(case.config.hidden_size).input_batch  # the last loop's (the ops'): in place
        assert runner.seq_lens_np[:1].tolist() == [15 + 2 * 3]  # the runner's host seq_lens, raised twice per step


def test_draft_seq_lens_batch_bound(device):
    """draft-seq-lens-batch-bound (main): two requests with nothing rejected, seq_lens 15 and 7, K = 3:
    every step of both attends with min(15 + 3, max_model_len) = 18, where the core's are 15 + j - 1 and
    7 + j - 1; in the ops and in the propose loop's forwards."""
    only_where_it_is("draft-seq-lens-batch-bound")
    long = decode_case(max_model_len=64, num_computed=11, k=3, accepted=3)
    short = RequestCase(tokens=[30, 31, 32, 33, 34], num_computed=3, query_len=4, num_drafts=3,
                        sampled=[41, 42, 43, 44], discarded=False, blocks=[5, 6, 7])  # fmt: skip
    case = long._replace(requests=[long.requests[0], short])
    got, _ = steps(case)
    assert [seq for _, seq, _ in got] == [[18, 18], [18, 18]]
    assert [reference.step(case, j).seq_lens for j in (2, 3)] == [[16, 8], [17, 9]]
    assert seen_by_attention(case, device)[1:] == [[18, 18], [18, 18]]
    assert [positions for positions, _, _ in got] == [[15, 7], [16, 8]]  # positions advance per request
