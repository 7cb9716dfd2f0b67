"""vllm-ascend's whole _propose loop, driven with the tiny MTP model and paged cache.

The gate's own end-to-end property runs this loop under ``--impl vllm_ascend``
with the divergences modelled (``divergences.RULES``). Here: what two of them
do to a serving run, shown on the drafts and rows themselves.
"""

from __future__ import annotations

import dataclasses

from sim.impls.vllm_ascend.adapter import AscendProposer
from sim.impls.vllm_ascend.divergences import RULES
from sim.oracle.cases import to_batch
from sim.serving.checker import DEFECT
from sim.serving.run import build_models, run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.known_defects import pin, pin_run
from tests.impls.suites import CPU, one_decode

REJECTING = Scenario(
    num_spec_tokens=3,
    block_size=4,
    accept="none",  # every draft rejected: n_rej = K on every decode
    requests=tuple(RequestSpec(0, 5 + 3 * i, 12) for i in range(4)),
)


def test_padded_drafts_after_the_first_read_rejected_kv(device):
    """padded-seq-lens-not-lowered, on the drafts: with rejections, drafts 2..K differ from the
    from-scratch reference (attention reads the rejected tokens' KV); draft 1 and every piece of
    metadata follow the modelled rule; unpadded mode lowers seq_lens and matches everything.
    A run that follows the spec instead says the defect is fixed (``known_defects.pin_run``)."""
    modelled = run_scenario(REJECTING, device, proposer_cls=AscendProposer, rules=RULES, stop_at_first_mismatch=False)
    assert modelled.ok, [str(m) for m in modelled.mismatches[:4]]
    if pin_run(modelled, "padded-seq-lens-not-lowered") == DEFECT:
        padded = run_scenario(REJECTING, device, proposer_cls=AscendProposer, stop_at_first_mismatch=False)
        drafts = [m for m in padded.mismatches if m.what.startswith("draft")]
        assert drafts, "the defect's metadata, yet padded drafts 2..K matched the reference"
        assert all(not m.what.startswith("draft 1") for m in drafts), [str(m) for m in drafts[:4]]
    unpadded = dataclasses.replace(REJECTING, padded=False)
    assert run_scenario(unpadded, device, proposer_cls=AscendProposer, rules=RULES).ok


def test_steps_run_at_first_pass_rows(device):
    """mtp-steps-run-padded-rows: steps 2..K run at the first pass's row count; the rows past B write no KV."""
    from tests.impls.vllm.test_propose import _at_the_end

    case = _at_the_end()
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=16, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU)
    batch, sampled = to_batch(case, CPU, padded=True)
    proposer = AscendProposer(case.config, model, device)
    proposer.record()
    proposer.propose(batch, sampled)
    rows = [rec.rows for rec in proposer.trace]
    assert rows == [batch.num_tokens] * 3 and batch.num_reqs == 1 < batch.num_tokens
    for rec in proposer.trace[1:]:
        assert rec.padding_slots.tolist() == [-1] * (batch.num_tokens - 1)


def test_eagle3_steps_run_one_row_per_request_eagerly(device):
    """mtp-steps-run-padded-rows is method mtp's: an eager EAGLE-3 drafter runs steps 2..K at one row per
    request (vllm-ascend's ``input_batch_size``)."""
    from tests.impls.vllm.test_propose import _at_the_end

    case = _at_the_end()
    case = case._replace(config=dataclasses.replace(case.config, method="eagle3"))
    scenario = Scenario(
        num_spec_tokens=3, block_size=4, max_model_len=16, method="eagle3", requests=(RequestSpec(0, 4, 4),)
    )
    model, _ = build_models(scenario, CPU)
    batch, sampled = to_batch(case, CPU, padded=True)
    proposer = AscendProposer(case.config, model, device)
    proposer.record()
    proposer.propose(batch, sampled)
    assert [rec.rows for rec in proposer.trace] == [batch.num_tokens, 1, 1] and batch.num_tokens > 1


def test_num_computed_tokens_drift(device):
    """num-computed-tokens-drift: the ``num_computed_tokens_cpu`` attention is handed at steps 2..K is the
    first pass's advanced by one per step, not the step's ``seq_len - 1``: a decode whose first pass had
    query length q is short by q - 1 there; the first pass's count is the tokens already in KV."""
    case = one_decode(96, [1, 2, 3])  # K = 2, query length 3, far from max_model_len
    scenario = Scenario(num_spec_tokens=2, block_size=4, hidden_size=8, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU)
    batch, sampled = to_batch(case, CPU, padded=True)
    proposer = AscendProposer(case.config, model, device)
    proposer.record()
    proposer.propose(batch, sampled)
    (req,) = case.requests
    first, *steps = proposer.trace
    assert first.num_computed_tokens.tolist() == [req.num_computed] and req.query_len > 1
    got = [rec.num_computed_tokens.tolist() for rec in steps]
    drift = [[req.num_computed + rec.step - 1] for rec in steps]
    spec = [[int(rec.seq_lens[0]) - 1] for rec in steps]
    assert drift != spec
    pin("num-computed-tokens-drift", got == drift, got == spec, f"got {got}, the defect's {drift}, the spec's {spec}")


def test_a_run_starts_from_a_fresh_proposers_state(device):
    """The vllm-ascend proposer is shared between runs (built once per hidden size). A run starts from
    the state a newly built one holds, whatever the last run left: here an id past this run's vocabulary
    in the row vllm-ascend reads before writing it (``stale-last-row``), which crashed the tiny model
    (IndexError: index 90 is out of bounds for dimension 0 with size 32)."""
    from sim.impls.vllm_ascend.build import ascend_proposer
    from tests.impls.suites import STALE_ROW_RUN, after_a_larger_vocabulary

    after_a_larger_vocabulary(ascend_proposer(STALE_ROW_RUN.hidden_size))
    report = run_scenario(STALE_ROW_RUN, device, proposer_cls=AscendProposer, rules=RULES, stop_at_first_mismatch=False)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
