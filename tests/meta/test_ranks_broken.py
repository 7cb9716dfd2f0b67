"""The PCP and TP properties fail on broken grouped proposers run on real ranks.

Each test shares its worker's rank pools with the properties of the same
``xdist_group`` (tests/conftest.py), and runs last in the gate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

import pytest

from sim.ranks.pcp import PcpCase
from sim.ranks.pool import CollectiveMismatch
from tests.checks.modes import NEEDS_GRAPHS
from tests.checks.rank_checks import PCP_SMALL, TP_SMALL, TP_SMALL_SEDP, assert_pcp, assert_tp, variant_path
from tests.meta import broken_ops, broken_pcp, broken_sedp, broken_tp

pytestmark = pytest.mark.order(-1)

# The comparison with one rank failed, and the replay names the variant.
COMPARED = r"replay: python -m sim replay \S+ --pcp \d+ --(proposer|ops) tests\.meta\."
COMPARED_TP = r"replay: python -m sim replay \S+( --pcp \d+)? --proposer tests\.meta\."


@pytest.mark.xdist_group("pcp2")
@pytest.mark.parametrize(
    "proposer, ops",
    [
        (broken_pcp.DecodeFixedReshape, None),
        (broken_pcp.GraphPaddingBeforeGather, None),
        (None, broken_ops.SlotPlusOne),
    ],
    ids=lambda v: v and v.__name__,
)
def test_broken_pcp_variant_is_caught(device, pcp_pools, proposer, ops):
    with pytest.raises(AssertionError, match=COMPARED):
        assert_pcp(
            PCP_SMALL, pcp_pools(2), device, "broken-pcp", proposer=variant_path(proposer), ops=variant_path(ops)
        )


@pytest.mark.xdist_group("pcp2")
@pytest.mark.parametrize("variant", [broken_pcp.LogitsOnceOnRank1], ids=lambda v: v.__name__)
def test_pcp_ranks_issuing_different_collectives_are_reported(device, pcp_pools, variant):
    with pytest.raises(CollectiveMismatch, match="different collectives"):
        pcp_pools(2).run(PcpCase(asdict(PCP_SMALL), proposer=variant_path(variant)))


@pytest.mark.xdist_group("tp")
@pytest.mark.parametrize(
    "variant, ranks",
    [(broken_tp.ShardsInRankOrderReversed, 2), (broken_tp.VocabGatheredOverPcpGroup, 4)],  # 4: a 2 x 2 mesh
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_vocabulary_slices_joined_wrong_are_caught(device, tp_pools, variant, ranks):
    """Slices joined in the wrong rank order, or gathered over the PCP group of a mesh."""
    with pytest.raises(AssertionError, match=f"drafts(.|\n)*{COMPARED_TP}"):
        assert_tp(TP_SMALL, tp_pools(ranks), device, f"broken-tp-{variant.__name__}", proposer=variant_path(variant))


@pytest.mark.xdist_group("tp")
@pytest.mark.parametrize(
    "variant",
    [broken_sedp.ChunksGatheredLastRankFirst, broken_sedp.RowsInterleaved, broken_sedp.ReduceScatteredLikeTheSeed],
    ids=lambda v: v.__name__,
)
def test_broken_shared_expert_dp_is_caught(device, tp_pools, variant):
    with pytest.raises(AssertionError, match=f"(drafts|metadata|raised|failed)(.|\n)*{COMPARED_TP}"):
        assert_tp(TP_SMALL_SEDP, tp_pools(2), device, f"broken-sedp-{variant.__name__}", proposer=variant_path(variant))


@pytest.mark.xdist_group("tp")
@pytest.mark.parametrize(
    "variant, mode",
    [
        (broken_sedp.ChunkUnpaddedOnRank1, "eager"),
        pytest.param(broken_sedp.SplitSkippedInDummyRunOnRank1, "piecewise", marks=NEEDS_GRAPHS),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_tp_ranks_issuing_different_collectives_are_reported(device, tp_pools, variant, mode):
    """A rank that sends fewer rows, or skips the split in its dummy runs, is reported, not hung."""
    case = PcpCase(asdict(dataclasses.replace(TP_SMALL_SEDP, graph_mode=mode)), proposer=variant_path(variant))
    with pytest.raises(CollectiveMismatch, match="different (numbers of )?collectives"):
        tp_pools(2).run(case)


@pytest.mark.xdist_group("tp")
@pytest.mark.parametrize("variant", [broken_tp.UnpaddedOnRank1], ids=lambda v: v.__name__)
def test_ranks_padding_to_different_sizes_are_reported(device, tp_pools, variant):
    with pytest.raises(CollectiveMismatch, match="different collectives"):
        tp_pools(2).run(PcpCase(asdict(TP_SMALL), proposer=variant_path(variant)))
