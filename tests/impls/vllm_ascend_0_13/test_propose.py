"""0.13.0's whole ``_propose`` loop with the tiny MTP model: the divergences only the loop shows."""

from __future__ import annotations

import dataclasses

from sim.impls.vllm_ascend_0_13 import interop
from sim.impls.vllm_ascend_0_13.adapter import Ascend013Proposer
from sim.impls.vllm_ascend_0_13.divergences import RULES
from sim.impls.vllm_ascend_0_13.mla_metadata import rope_positions
from sim.oracle.cases import to_batch
from sim.serving.checker import SPEC
from sim.serving.run import build_models, run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.known_defects import pin_run
from tests.impls.suites import CPU
from tests.impls.vllm_ascend_0_13.cases import one_decode

CHUNKED = Scenario(
    num_spec_tokens=3,
    block_size=64,
    max_model_len=128,
    token_budget=6,  # prompts are chunked: most batches hold a prefill
    padded=False,
    accept="all",
    max_iterations=10,
    requests=(RequestSpec(0, 9, 8), RequestSpec(1, 4, 8)),
)


def test_prefill_batch_repeats_draft_one(device):
    """prefill-batch-drafts-once: a batch with a prefill runs one model call and every request's K drafts
    are draft 1; a decode-only batch runs K calls. Without the rule, drafts 2..K differ from the reference."""
    report = run_scenario(CHUNKED, device, proposer_cls=Ascend013Proposer, rules=RULES)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    if pin_run(report, "prefill-batch-drafts-once") == SPEC:
        return
    seen = {True: 0, False: 0}
    assert run_scenario(CHUNKED, device, proposer_cls=Ascend013Proposer, rules=RULES, on_iteration=_count(seen)).ok
    assert seen[True] and seen[False], seen
    without = dataclasses.replace(RULES, prefill_batches_draft_once=False)
    report = run_scenario(CHUNKED, device, proposer_cls=Ascend013Proposer, rules=without, stop_at_first_mismatch=False)
    assert any(m.what.startswith("draft") and not m.what.startswith("draft 1") for m in report.mismatches)


def _count(seen):
    def on_iteration(report, sim, proposer):
        calls = len(proposer.trace)
        drafts = report.drafts[-1]
        prefill = calls == 1
        seen[prefill] += 1
        if prefill:
            assert all(len(set(d)) == 1 for d in drafts), drafts
        else:
            assert calls == sim.config.num_spec_tokens

    return on_iteration


def test_steps_run_at_first_pass_rows(device):
    """mtp-steps-run-padded-rows: steps 2..K run at the first pass's row count; rows past B write no KV;
    the decode metadata's RoPE tables follow the positions the model is given."""
    case = one_decode(num_computed=6, blocks=[3, 1, 2, 6], k=3, bs=4, mml=64, rejected=1)
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=64, vocab_size=96, hidden_size=8)
    model, _ = build_models(scenario, CPU)
    batch, sampled = to_batch(case, CPU, padded=True)
    assert not interop.with_prefill(batch)
    proposer = Ascend013Proposer(case.config, model, device)
    proposer.record()
    proposer.propose(batch, sampled)
    assert [rec.rows for rec in proposer.trace] == [batch.num_tokens] * 3 and batch.num_tokens > 1
    for rec in proposer.trace[1:]:
        assert rec.padding_slots.tolist() == [-1] * (batch.num_tokens - 1)
    for rec, (decode, _) in zip(proposer.trace, proposer.model.metadata):
        assert rope_positions(decode)[: rec.positions.shape[0]] == rec.positions.tolist()


def test_a_run_starts_from_a_fresh_proposers_state(device):
    """The 0.13 proposer is shared between runs (built once per hidden size). A run starts from the
    state a newly built one holds, whatever the last run left: here an id past this run's vocabulary
    in the row 0.13 reads before writing it (``stale-last-row``), which crashes the tiny model."""
    from sim.impls.vllm_ascend_0_13.build import mtp_proposer
    from tests.impls.suites import STALE_ROW_RUN, after_a_larger_vocabulary

    after_a_larger_vocabulary(mtp_proposer(STALE_ROW_RUN.hidden_size))
    report = run_scenario(
        STALE_ROW_RUN, device, proposer_cls=Ascend013Proposer, rules=RULES, stop_at_first_mismatch=False
    )
    assert report.ok, [str(m) for m in report.mismatches[:4]]
