"""Prefill context parallel on real process groups equals one rank.

P ranks (gloo processes on the simulator, started once per module) serve the
same scenario; every rank's drafts and per-step metadata must equal the
single-rank run, which itself equals the from-scratch reference. (A faulty
rank's error: tests/harness/test_rank_pools.py.)
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.checks.modes import MODE_GROUPS, per_group
from tests.checks.rank_checks import PCP_SMALL, assert_pcp
from tests.strategies.scenarios import scenarios

# Multi-process: after every single-process property, before the meta-tests.
# Under xdist each group stays on one worker, which starts only its own pool.
# The 4-rank property is the gate's longest test (~40% of it): a group of its
# own, started right after the cheap core properties, so it runs beside the
# rest instead of alone at the end (README, "Ordering and speed").
pytestmark = [pytest.mark.order(-2), pytest.mark.xdist_group("pcp2")]

PCP = per_group(4, at_least=1)  # multi-process: left out of mutate
SIZES = [
    pytest.param(2, id="2"),
    pytest.param(4, id="4", marks=[pytest.mark.xdist_group("pcp4"), pytest.mark.order(1)]),
]


@pytest.mark.order(1)
@pytest.mark.parametrize("size", SIZES)
def test_a_case_every_broken_variant_fails_equals_single_rank(device, pcp_pools, size):
    """``PCP_SMALL`` (a long prefill split over the ranks beside decodes, blocks crossed) fails on every
    broken variant below: run first on each pool, it fails a PCP bug within seconds of the pool's
    start, before the property below draws (and shrinks) scenarios."""
    assert_pcp(PCP_SMALL, pcp_pools(size), device, f"pcp-small-{size}")


@pytest.mark.parametrize("modes", MODE_GROUPS)
@pytest.mark.parametrize("size", SIZES)
@PCP
@given(scenario=scenarios(max_reqs=4, max_iterations=10), data=st.data())
def test_pcp_equals_single_rank(device, pcp_pools, size, modes, scenario, data, request):
    """Padded or unpadded (drawn), eager or graph modes (later steps captured, collectives included)."""
    mode = data.draw(st.sampled_from(modes), label="mode")
    event(f"mode={mode}")
    assert_pcp(dataclasses.replace(scenario, graph_mode=mode), pcp_pools(size), device, request.node.name)
