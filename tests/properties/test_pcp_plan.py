"""The PCP split plan equals the from-scratch split, and the all-gather restores order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from mtp.pcp import PAD_ROW, pcp_split_plan
from sim.oracle import reference
from tests.strategies.pcp import pcp_cases

pytestmark = pytest.mark.order(0)


@given(case=pcp_cases())
def test_split_plan_matches_reference(case):
    # int32 lengths, as a runner's host buffers hold them: the plan's arrays are int64 all the same.
    plan = pcp_split_plan(np.array(case.query_lens, dtype=np.int32), np.array(case.split), case.size)
    want = reference.pcp_rows(case.query_lens, case.split, case.size)
    assert [r.tolist() for r in plan.rank_rows] == want, case
    assert plan.restore_index.tolist() == reference.pcp_restore(want, sum(case.query_lens)), case
    chunks = 2 * case.size
    padded = [-(-q // chunks) * chunks if s else q for q, s in zip(case.query_lens, case.split)]
    assert plan.padded_lens.tolist() == padded, case
    assert plan.size == case.size, case
    assert {a.dtype for a in (plan.padded_lens, plan.restore_index, *plan.rank_rows)} == {np.dtype(np.int64)}, case


@pytest.mark.parametrize("size", [1, 2, 4])
def test_an_empty_batch_plans_no_rows(size):
    """A rank pool with no requests this step (its dummy run) still gets a plan."""
    plan = pcp_split_plan(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), size)
    assert [r.tolist() for r in plan.rank_rows] == [[]] * size
    assert plan.rows_per_rank == 0 and plan.restore_index.tolist() == []


def test_bad_plan_arguments_are_named():
    with pytest.raises(ValueError, match=r"pcp_size=0: must be >= 1"):
        pcp_split_plan(np.array([3]), np.array([True]), 0)
    with pytest.raises(ValueError, match=r"split.shape=\(2,\): expected \(1,\)"):
        pcp_split_plan(np.array([3]), np.array([True, False]), 2)


@given(case=pcp_cases())
def test_all_gather_then_restore_is_identity(case):
    plan = pcp_split_plan(np.array(case.query_lens), np.array(case.split), case.size)
    gathered = np.concatenate(plan.rank_rows)  # what an all-gather of row ids gives
    restored = gathered[plan.restore_index]
    assert restored.tolist() == list(range(sum(case.query_lens))), case
    assert (gathered[plan.restore_index] != PAD_ROW).all(), case
