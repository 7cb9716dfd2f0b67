"""The PCP split plan equals the from-scratch split, and the all-gather restores order."""

from __future__ import annotations

import numpy as np
from hypothesis import given

from mtp.pcp import PAD_ROW, pcp_split_plan
from sim.oracle import reference
from tests.strategies.pcp import pcp_cases


@given(case=pcp_cases())
def test_split_plan_matches_reference(case):
    plan = pcp_split_plan(np.array(case.query_lens), np.array(case.split), case.size)
    want = reference.pcp_rows(case.query_lens, case.split, case.size)
    assert [r.tolist() for r in plan.rank_rows] == want, case
    assert plan.restore_index.tolist() == reference.pcp_restore(want, sum(case.query_lens)), case
    assert all(p % (2 * case.size) == 0 for p, s in zip(plan.padded_lens, case.split) if s), case


@given(case=pcp_cases())
def test_all_gather_then_restore_is_identity(case):
    plan = pcp_split_plan(np.array(case.query_lens), np.array(case.split), case.size)
    gathered = np.concatenate(plan.rank_rows)  # what an all-gather of row ids gives
    restored = gathered[plan.restore_index]
    assert restored.tolist() == list(range(sum(case.query_lens))), case
    assert (gathered[plan.restore_index] != PAD_ROW).all(), case
