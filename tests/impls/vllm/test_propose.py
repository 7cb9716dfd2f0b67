"""vLLM's whole propose() loop, driven with the tiny MTP model and paged cache, against the reference.

Drafts must equal the from-scratch reference (margin-aware, as in the gate);
per-step metadata must equal it too, except where a documented divergence
says otherwise: those places are computed by the V1 rule and counted.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import event, given, settings

from mtp.proposer import MtpProposer
from sim.impls.vllm.adapter import GREEDY, VllmProposer
from sim.impls.vllm.divergences import RULES
from sim.oracle import reference
from sim.oracle.cases import BatchCase, RequestCase, to_batch
from sim.serving.checker import RunChecker
from sim.serving.run import RunReport, build_models, serve
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.impls.suites import CPU
from tests.impls.vllm.cases import vllm_step_expected
from tests.strategies.scenarios import scenarios


def run_classified(scenario: Scenario, device) -> tuple[list[str], dict[str, int]]:
    """(unexplained mismatches, divergence id -> places it explained) over a whole serving run."""
    model, target = build_models(scenario, CPU)
    sim = ServingSim(scenario, target)
    proposer = VllmProposer(sim.config, model, device)
    proposer.record()
    ref_model = build_models(scenario, CPU)[0]
    # The drafts as the gate compares them: under vLLM's rules, the KV its overflowing steps write into a
    # request's first block (overflow-restart) modelled, so a later call reading it is still compared.
    checker = RunChecker(scenario, model, ref_model, target, RULES, (), torch.float32)
    bad, seen = [], {"stale-last-row": 0, "overflow-restart": 0}
    for iteration, drafts, _ in serve(sim, proposer, device, scenario, before_propose=checker.before_propose):
        it, case = iteration.index, iteration.case
        first, trace = reference.first_pass(case, scenario.padded), proposer.trace
        got_ids, last = trace[0].input_ids.tolist(), len(first.input_ids) - 1
        if last not in first.sample_indices:  # stale-last-row: only the batch's last row, only padded
            seen["stale-last-row"] += got_ids[last] != first.input_ids[last]
            bad += [f"it {it}: stale row in unpadded mode"] * (not scenario.padded)
            got_ids[last] = first.input_ids[last]
        flat_pos = [r.num_computed + i for r in case.requests for i in range(r.query_len)]
        for name, got, want in (
            ("input_ids", got_ids, first.input_ids),
            ("positions", trace[0].positions.tolist(), [flat_pos[i] for i in first.token_indices]),
            ("seq_lens", trace[0].seq_lens.tolist(), first.seq_lens),
            ("slot_mapping", trace[0].slot_mapping.tolist(), first.slot_mapping),
            ("query_start_loc", trace[0].query_start_loc.tolist(), first.query_start_loc),
            ("sample_indices", trace[0].sample_indices.tolist(), first.sample_indices),
        ):
            bad += [f"it {it}: first pass {name}: {got} != {want}"] * (got != want)
        for rec in trace[1:]:
            core = reference.step(case, rec.step)
            vllm = vllm_step_expected(case, first.accepted_seq_lens, rec.step)
            got = (rec.positions.tolist(), rec.seq_lens.tolist(), rec.slot_mapping.tolist())
            bad += [f"it {it}: step {rec.step}: {got} != {vllm}"] * (got != vllm)
            seen["overflow-restart"] += sum(g != c for g, c in zip(got[2], core.slot_mapping))
            bad += [f"it {it}: step {rec.step} seq_len_bound {rec.seq_len_bound}"] * (rec.seq_len_bound < max(got[1]))
        compared = RunReport(scenario)
        checker.check(iteration, drafts, proposer, compared)
        bad += [str(m) for m in compared.mismatches]
        if bad:
            break
    return bad, seen


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@settings(max_examples=max(1, settings.default.max_examples // 2))
@given(scenario=scenarios())
def test_full_loop_matches_reference_up_to_divergences(device, padded, scenario):
    bad, seen = run_classified(dataclasses.replace(scenario, padded=padded), device)
    assert not bad, "\n".join(bad[:6])
    for divergence, n in seen.items():
        event(f"{divergence}: {'seen' if n else 'not seen'}")


def test_divergences_show_up_in_a_run(device):
    """A run that reaches max_model_len with K = 4 and rejections exhibits both loop divergences."""
    scenario = Scenario(
        seed=3,
        num_spec_tokens=4,
        block_size=2,
        max_model_len=24,
        accept="random",
        max_iterations=60,
        requests=(RequestSpec(0, 5, 40), RequestSpec(0, 9, 40), RequestSpec(1, 3, 40)),
    )
    bad, seen = run_classified(scenario, device)
    assert not bad, "\n".join(bad[:6])
    assert seen["overflow-restart"] > 0 and seen["stale-last-row"] > 0, seen


def test_a_run_starts_from_a_fresh_proposers_buffers(device):
    """The vLLM proposer is shared between runs (built once per hidden size). A run starts from the
    zeros a newly built one holds, whatever the last run left: here an id past this run's vocabulary
    in the row vLLM reads before writing it (``stale-last-row``), which crashed the tiny model."""
    from sim.impls.kit.vllm_eagle import eagle_proposer
    from tests.impls.suites import STALE_ROW_RUN, after_a_larger_vocabulary

    scenario = STALE_ROW_RUN
    after_a_larger_vocabulary(eagle_proposer(scenario.hidden_size))
    bad, _ = run_classified(scenario, device)
    assert not bad, "\n".join(bad[:6])


def _at_the_end(k: int = 3, mml: int = 16, bs: int = 4) -> BatchCase:
    """One decode whose k drafts were all accepted at the last position: step 2 overflows."""
    from mtp.config import ProposerConfig

    cfg = ProposerConfig(k, 96, bs, mml, 8, 2, 32)
    req = RequestCase(
        tokens=[5, 6, 7, 8, 9],
        num_computed=mml - k - 1,
        query_len=k + 1,
        num_drafts=k,
        sampled=[1, 2, 3, 4],
        discarded=False,
        blocks=[3, 0, 2, 1],
    )
    return BatchCase(cfg, [req], seed=0)


@pytest.mark.parametrize("proposer_cls", [MtpProposer, VllmProposer], ids=["core", "vllm"])
def test_overflow_restart_writes_kv(device, proposer_cls):
    """overflow-restart, its consequence: the step after the overflow writes KV at the request's own
    position 1 (block 3, slot 13) under vLLM; the core writes nothing there."""
    case = _at_the_end()
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=16, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU, poison_kv=False)  # zeros: a write leaves non-zero K
    batch, sampled = to_batch(case, CPU, padded=True)
    proposer_cls(case.config, model, device).propose(batch, sampled)
    written = bool(model.cache.k[3 * 4 + 1].abs().sum() > 0)
    assert written == (proposer_cls is VllmProposer)


def test_padded_propose_mutates_caller_seq_lens(device):
    """seq-lens-in-place: vLLM's padded propose lowers the caller's seq_lens by the rejected count and
    raises them once per step; the adapter hands it a copy, so the batch is untouched."""
    from sim.impls.kit import vllm_interop as interop
    from sim.impls.kit.vllm_eagle import configured

    case = _at_the_end()
    case = case._replace(requests=[case.requests[0]._replace(sampled=[1, -1, -1, -1])])
    batch, sampled = to_batch(case, CPU, padded=True)
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=16, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU)
    adapter = VllmProposer(case.config, model, device)
    adapter.propose(batch, sampled)
    assert batch.seq_lens.tolist() == [16]
    p = adapter._vllm()
    step_one = interop.to_step_one_inputs(batch, sampled, 96)
    cad = interop.to_common_attn_metadata(batch)
    ids, counts = p.prepare_next_token_ids_padded(
        sampled.padded, step_one.requests, step_one.input_batch, step_one.discard_mask
    )
    spec_cad, sample, rejected = p.prepare_inputs_padded(cad, interop.to_spec_decode_metadata(batch), counts)
    assert configured(3, 4, 16, 32) is p and rejected.tolist() == [3]
    p.propose(
        3,
        batch.token_ids,
        batch.positions,
        batch.hidden_states,
        ids,
        sample,
        spec_cad,
        sampling_metadata=GREEDY,
        num_rejected_tokens_gpu=rejected,
    )
    assert cad.seq_lens.tolist() == [16 - 3 + 2]  # the caller's tensor: -3 rejected, +1 per later step
