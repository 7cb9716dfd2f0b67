"""The reference's rules for documented divergences (``sim.oracle.rules``), on hand-worked steps.

max_model_len 10; the last accepted position is 8 (seq_len 9) unless stated.
"""

from __future__ import annotations

import pytest

from sim.oracle.rules import CORE, Rules

M = 10


def _steps(rules: Rules, last_pos: int, base: int, k: int = 4):
    return [rules.step(last_pos, base, j, M) for j in range(2, k + 1)]


def test_core_masks_every_overflowing_step():
    assert _steps(CORE, 8, 9) == [(9, 10, True), (0, 1, False), (0, 1, False)]


def test_restart_continues_from_position_zero_with_real_slots():
    assert _steps(Rules(overflow="restart"), 8, 9) == [(9, 10, True), (0, 1, False), (1, 2, True)]


def test_seq_len_restart_masks_positions_but_counts_seq_len_on():
    rules = Rules(overflow="seq-len-restart")
    assert _steps(rules, 8, 9) == [(9, 10, True), (0, 1, False), (0, 2, False)]
    # Not lowered by 2 rejected tokens: seq_len passes max_model_len while the position is valid.
    assert _steps(rules, 6, 9) == [(7, 10, True), (8, 1, True), (9, 2, True)]


def test_padded_base_and_defined_drafts():
    lowered, not_lowered = CORE, Rules(padded_seq_lens_lowered=False)
    assert lowered.step_seq_base(9, 7, padded=True) == 7 and not_lowered.step_seq_base(9, 7, padded=True) == 9
    assert not_lowered.step_seq_base(9, 7, padded=False) == 7
    assert lowered.drafts_defined(True, 3) == 3 and not_lowered.drafts_defined(True, 3) == 1
    assert not_lowered.drafts_defined(False, 3) == 3


def test_unknown_overflow_rule_is_named():
    with pytest.raises(ValueError, match="overflow='clamp'"):
        Rules(overflow="clamp")
