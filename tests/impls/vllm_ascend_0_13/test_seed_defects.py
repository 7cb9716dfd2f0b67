"""The 0.13-era proposer's defects (docs/DESIGN.md "Known defects of the 0.13-era proposer") on vllm-ascend 0.13.0's shipped MtpProposer.

One test per defect: each asserts whether 0.13.0 has it, on the metadata 0.13's code computes,
and on the drafts themselves where the defect changes them (whole serving runs of ``_propose``
with the tiny model, compared with the from-scratch reference under rules that assume the
defect absent: the mismatches are the defect's, and only its). Each pins the defect's values or
the spec's (``known_defects.pin``): a 0.13 with the defect fixed records the spec's, and the
session says it is fixed, instead of a pin failing with a contradicting mismatch.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given

from sim.impls.vllm_ascend_0_13 import interop
from sim.impls.vllm_ascend_0_13.adapter import Ascend013Proposer, run_propose
from sim.impls.vllm_ascend_0_13.build import configured
from sim.impls.vllm_ascend_0_13.divergences import RULES
from sim.impls.vllm_ascend_0_13.model import MlaTinyMtp
from sim.oracle import compare, reference
from sim.oracle.cases import to_batch
from sim.serving.checker import DEFECT, SPEC
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.known_defects import pin, pin_run
from tests.impls.suites import CPU
from tests.impls.vllm_ascend_0_13.cases import ASCEND, both, one_decode
from tests.strategies.batches import batch_cases

# Blocks far apart: a draft crossing a block boundary lands in a block that is not the next one.
CROSSING = one_decode(num_computed=2, blocks=[7, 2, 5])  # positions 2..5 verified, drafts at 6, 7, 8


def _drafts_mismatches(scenario, rules, device):
    report = run_scenario(scenario, device, proposer_cls=Ascend013Proposer, rules=rules, stop_at_first_mismatch=False)
    return report, [m for m in report.mismatches if m.what.startswith("draft")]


def test_slot_plus_one_across_blocks():
    """Has it. Step j's slot is the last accepted token's slot + (j - 1): block 7's last slot + 1 is block 8,
    where the table says block 2; the core's slot is the table's."""
    case = CROSSING
    batch, _, core, got = both(case, padded=True)
    bs = case.config.block_size
    last = int(got.base_positions[0])  # 5: block 1 of the table (block 2), offset 1
    slots, plus_one, table = [], [], []
    for j in (2, 3, 4):
        mine = ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        pos = last + j - 1
        slots.append(int(mine.slot_mapping[0]))
        plus_one.append(2 * bs + 1 + (j - 1))
        table.append(case.requests[0].blocks[pos // bs] * bs + pos % bs)
        assert reference.step(case, j).slot_mapping[0] == table[-1]
    assert plus_one[-1] != table[-1]  # position 8: block 5, not block 2's "next slot"
    pin("slot-plus-one", slots == plus_one, slots == table, f"slots {slots}: plus one {plus_one}, table {table}")


@given(case=batch_cases())
def test_slot_plus_one_is_the_rule_everywhere(case):
    """Every step slot of 0.13 is the plus-one rule's; it differs from the table's exactly where the rule does."""
    batch, _, _, got = both(case, padded=False)
    table_rules = dataclasses.replace(RULES, slots_from_block_table=True)
    for j in range(2, case.config.num_spec_tokens + 1):
        mine = ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        plus_one = reference.step(case, j, False, RULES).slot_mapping
        table = reference.step(case, j, False, table_rules).slot_mapping
        slots = mine.slot_mapping.tolist()
        pin(
            "slot-plus-one", slots == plus_one, slots == table, f"step {j}: {slots}, plus one {plus_one}, table {table}"
        )


def test_slot_plus_one_changes_the_drafts(device):
    """On the drafts: with small blocks (the allocator hands out blocks that are not adjacent), unpadded
    serving runs under rules that look slots up in the table see drafts differ from the reference
    (KV written to, then read from, the wrong slots), and metadata differ in slots only."""
    scenario = Scenario(
        num_spec_tokens=3, block_size=2, padded=False, accept="all", max_iterations=16,
        requests=tuple(RequestSpec(i, 5 + 3 * i, 12) for i in range(4)),
    )  # fmt: skip
    modelled = run_scenario(scenario, device, proposer_cls=Ascend013Proposer, rules=RULES)
    assert modelled.ok, [str(m) for m in modelled.mismatches[:4]]
    if pin_run(modelled, "slot-plus-one") == SPEC:
        return
    report, drafts = _drafts_mismatches(scenario, dataclasses.replace(RULES, slots_from_block_table=True), device)
    assert drafts, "drafts matched the reference although slots were advanced by +1 across blocks"
    others = [m for m in report.mismatches if not m.what.startswith("draft")]
    assert others and all("slot_mapping" in m.what for m in others), [str(m) for m in others[:4]]


def test_slot_plus_one_writes_into_another_requests_kv(device, monkeypatch):
    """Has it, across requests, in the same call. Found by the gate under the ``ci`` profile: at
    iteration 4, request 0's step 2 runs past block 61 and writes slot 248, block 62's first slot:
    request 1's position 36, which request 1's own step 2 reads. Request 1's draft 1 is right, its
    draft 2 reads request 0's K/V. The defect model replays the whole batch slot by slot
    (``sim.oracle.defect_drafts``), and the run matches; a model that replays each request alone, its
    own writes only, sees exactly request 1's draft 2 differ."""
    scenario = Scenario(
        seed=0, num_spec_tokens=2, block_size=4, max_model_len=63, token_budget=21, max_num_reqs=4,
        padded=False, accept="greedy", vocab_size=32, max_iterations=24,
        requests=(RequestSpec(0, 8, 37), RequestSpec(2, 36, 2)),
    )  # fmt: skip
    modelled = run_scenario(scenario, device, proposer_cls=Ascend013Proposer, rules=RULES)
    assert modelled.ok, [str(m) for m in modelled.mismatches[:4]]
    if pin_run(modelled, "slot-plus-one") == SPEC:
        return
    batch_wide = compare.defect_drafts

    def each_alone(model, call, rules, tolerance):
        if rules.first_draft_repeated(call.case):  # a prefill in the batch: no step runs (prefill-batch-drafts-once)
            return batch_wide(model, call, rules, tolerance)
        out, row = [], 0
        for r, req in enumerate(call.case.requests):
            alone = call._replace(
                case=call.case._replace(requests=[req]),
                histories=[call.histories[r]],
                prefix_hidden=[call.prefix_hidden[r]],
                batch_hidden=call.batch_hidden[row : row + req.query_len],
                mrope=None if call.mrope is None else [call.mrope[r]],
            )
            out += batch_wide(model, alone, rules, tolerance)
            row += req.query_len
        return out

    monkeypatch.setattr(compare, "defect_drafts", each_alone)
    report, drafts = _drafts_mismatches(scenario, RULES, device)
    nearest = [(m.iteration, m.request, m.what.split(" (under")[0]) for m in drafts if not m.also]
    assert nearest == [(4, 1, "draft 2")], [str(m) for m in drafts]


@given(case=batch_cases())
def test_padded_seq_lens_not_lowered(case):
    """Has it. Padded, step j attends to seq_len + j - 1 keys, n_rej more than the core, exactly on the
    requests that rejected a draft (while seq_len has not passed max_model_len)."""
    batch, _, core, got = both(case, padded=True)
    mml = case.config.max_model_len
    start, accepted = got.first.accepted_seq_lens.tolist(), core.first.accepted_seq_lens.tolist()
    assert start == batch.seq_lens.tolist()  # the intermediate the step loop starts from (a fix may lower it there)
    for j in range(2, case.config.num_spec_tokens + 1):
        mine = ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        want = reference.step(case, j)
        live = [r for r, s in enumerate(start) if s + j - 1 <= mml]
        excess = [int(mine.seq_lens[r]) - want.seq_lens[r] for r in live]
        rejected = [start[r] - accepted[r] for r in live]
        pin("padded-seq-lens-not-lowered", excess == rejected, not any(excess), f"step {j}: {excess} over the spec")


def test_padded_seq_lens_not_lowered_changes_the_drafts(device):
    """On the drafts: every draft rejected (n_rej = K), blocks large enough that no draft crosses one
    (slot-plus-one is harmless): padded drafts 2..K differ from the reference, draft 1 never does;
    unpadded (lowered by prepare_inputs) matches everywhere."""
    scenario = Scenario(
        num_spec_tokens=3, block_size=64, max_model_len=64, accept="none", max_iterations=12,
        requests=tuple(RequestSpec(0, 5 + 3 * i, 12) for i in range(4)),
    )  # fmt: skip
    modelled = run_scenario(scenario, device, proposer_cls=Ascend013Proposer, rules=RULES)
    assert modelled.ok, [str(m) for m in modelled.mismatches[:4]]
    if pin_run(modelled, "padded-seq-lens-not-lowered") == DEFECT:
        lowered = dataclasses.replace(RULES, padded_seq_lens_lowered=True)
        report, drafts = _drafts_mismatches(scenario, lowered, device)
        assert drafts, "the defect's metadata, yet padded drafts 2..K matched the reference"
        assert all(not m.what.startswith("draft 1") for m in drafts), [str(m) for m in drafts[:4]]
    assert run_scenario(
        dataclasses.replace(scenario, padded=False), device, proposer_cls=Ascend013Proposer, rules=RULES
    ).ok


@given(case=batch_cases())
def test_max_query_len_from_old_lengths(case):
    """Has it. Unpadded prepare_inputs reports the original longest query; the drafts cannot change: the MLA
    builder reads it only to decide whether any request is a prefill, and decides the same with the
    compacted value."""
    batch, sampled, core, got = both(case, padded=False)
    original, compacted, longest = (
        int(batch.query_lens_cpu.max()),
        int(core.first.max_query_len),
        got.first.max_query_len,
    )
    pin("unpadded-max-query-len", longest == original, longest == compacted, f"got {longest}, {original} / {compacted}")
    p = configured(case.config.num_spec_tokens, case.config.max_model_len, case.config.hidden_size, padded=False)
    spec_cad = interop.first_pass_metadata(batch, got.first)
    spec_cad.max_query_len = original
    old = p.runner.builder.build(0, spec_cad)
    spec_cad.max_query_len = core.first.max_query_len
    new = p.runner.builder.build(0, spec_cad)
    assert (old.num_decodes, old.num_prefills, old.num_decode_tokens) == (
        new.num_decodes,
        new.num_prefills,
        new.num_decode_tokens,
    )


def test_mrope_positions_written_to_positions():
    """Has it. _propose copies target_positions into the 1-D ``positions`` buffer; M-RoPE's [3, T] rows
    (what the runner hands an M-RoPE model) do not fit and the call raises; nothing reaches ``mrope_positions``."""
    case = one_decode(num_computed=2, blocks=[7, 2, 5])
    batch, sampled = to_batch(case, CPU, padded=True)
    got = ASCEND.prepare_call(case.config, batch, sampled)
    p = configured(3, 64, case.config.hidden_size)
    rows = got.first.token_indices
    mrope = batch.positions[rows].unsqueeze(0).expand(3, -1).clone()
    before = p.positions.clone()
    with pytest.raises(RuntimeError, match="size|shape"):
        run_propose(
            p, MlaTinyMtp(None, 8), interop.first_pass_metadata(batch, got.first), batch.token_ids[rows], mrope,
            batch.hidden_states[rows], got.next.next_token_ids, got.first.sample_indices,
        )  # fmt: skip
    assert torch.equal(p.positions, before)
    assert getattr(p, "mrope_positions", None) is None or not p.mrope_positions.any()
