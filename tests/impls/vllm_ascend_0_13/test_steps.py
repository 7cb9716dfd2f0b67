"""Step 4: the per-step metadata 0.13.0's ``_propose`` hands the model, against the modelled rule."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given

from sim.impls.vllm_ascend_0_13.divergences import RULES
from sim.oracle import reference
from sim.serving.checker import DEFECT
from tests.checks import core_checks
from tests.checks.known_defects import pin
from tests.impls.vllm_ascend_0_13.cases import ASCEND, both, one_decode
from tests.strategies.batches import batch_cases


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases(max_model_len_range=(8, 24)))
def test_steps_follow_the_0_13_rule(padded, case):
    """Every step equals the modelled rule (divergences.RULES); positions equal the core's until a
    position reaches max_model_len."""
    batch, _, _, got = both(case, padded)
    fixes = [rules for _, rules in core_checks.alternatives_of(ASCEND, case, padded, RULES)]
    for j in range(2, case.config.num_spec_tokens + 1):
        mine = ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        mine = (mine.positions.tolist(), mine.seq_lens.tolist(), mine.slot_mapping.tolist())
        want, alternatives = _step(case, j, padded, RULES), [_step(case, j, padded, fix) for fix in fixes]
        assert mine == want or mine in alternatives, (mine, want)


def _step(case, j: int, padded: bool, rules) -> tuple[list, list, list]:
    """Step ``j``'s positions, seq_lens and slots under ``rules`` (its query offsets are one row per request)."""
    step = reference.step(case, j, padded, rules)
    return step.positions, step.seq_lens, step.slot_mapping


def test_overflow_position_restart():
    """overflow-position-restart, hand-worked: max_model_len 16, K 4, all 4 drafts accepted at positions
    11..14 (last accepted 15). Steps 2-4: the core masks every one (position 0, seq_len 1, slot -1);
    0.13 masks step 2 only, then reads position 0 back from its buffer and continues at 1, 2 with slots
    -1 + 1 = 0, 1 (block 0's slots, not this request's), and seq_len restarts at 1 on its own."""
    case = one_decode(num_computed=11, blocks=[3, 1, 2, 6], k=4, bs=4, mml=16)
    batch, _, _, got = both(case, padded=True)
    steps = [
        ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        for j in (2, 3, 4)
    ]
    got = [(int(s.positions[0]), int(s.seq_lens[0])) for s in steps]
    slots = [int(s.slot_mapping[0]) for s in steps]
    core = [reference.step(case, j) for j in (2, 3, 4)]
    assert [(c.positions[0], c.seq_lens[0], c.slot_mapping[0]) for c in core] == [(0, 1, -1)] * 3
    restart = [(0, 1), (1, 2), (2, 3)]
    if pin("overflow-position-restart", got == restart, got == [(0, 1)] * 3, f"got {got}") == DEFECT:
        table = [-1, 3 * 4 + 1, 3 * 4 + 2]  # the restarted positions 1, 2 in the request's block 0 (block 3)
        pin("slot-plus-one", slots == [-1, 0, 1], slots == table, f"slots {slots}")  # plus one: from -1
    vllm_like = dataclasses.replace(
        RULES, overflow_position="restart", overflow_seq_len="with-position", slots_from_block_table=True
    )
    assert reference.step(case, 3, True, vllm_like).slot_mapping[0] == 3 * 4 + 1  # vLLM: the request's block 0
