"""vLLM with its known defect fixed (``defect_fixes.FIXES``): the spec's value passes, and says so.

``unpadded-max-query-len`` is handed to the attention builder at the first pass and compared in single
calls (no serving run compares it): there the spec holds on the fix, the single-call check under
vLLM's rules accepts it, and the pin records the spec's value, so the session ends with "fixed: ..."
(tests/checks/known_defects.py).
"""

from __future__ import annotations

import os

import pytest

from sim.impls.divergence import spec_for
from sim.impls.vllm.adapter import VllmOps
from sim.impls.vllm.divergences import DIVERGENCES, RULES
from tests.impls.fixes import assert_max_query_len_fix_holds
from tests.impls.vllm import defect_fixes


@pytest.fixture(autouse=True)
def _unchanged_vllm():
    if os.environ.get(defect_fixes.ENV):
        pytest.skip(f"{defect_fixes.ENV} changes vLLM for the session; these tests change it themselves")


def test_a_fixed_max_query_len_is_the_spec(monkeypatch, device):
    defect_fixes.apply("max-query-len-compacted", monkeypatch)
    spec = spec_for(RULES, DIVERGENCES["unpadded-max-query-len"])
    ops = VllmOps()
    assert_max_query_len_fix_holds(ops, RULES, spec, device)


def test_every_defect_has_a_fix():
    fixed = {d for d, *_ in defect_fixes.FIXES.values()}
    assert fixed == {d.id for d in DIVERGENCES.values() if d.kind == "defect" and d.rule}
