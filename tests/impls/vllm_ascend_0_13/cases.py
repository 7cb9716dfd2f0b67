"""Shared helpers of the vllm-ascend 0.13 differential tests: both views of one case, hand-made cases."""

from __future__ import annotations

from mtp.config import ProposerConfig
from sim.impls.vllm_ascend_0_13.adapter import Ascend013Ops
from sim.oracle.cases import BatchCase, RequestCase
from tests.impls import suites

ASCEND, ASCEND_TRITON = Ascend013Ops(triton=False), Ascend013Ops()


def both(case: BatchCase, padded: bool, ops: Ascend013Ops = ASCEND):
    """(batch, sampled, core's PreparedCall, 0.13's PreparedCall) of one case."""
    return suites.both(case, padded, ops)


def one_decode(num_computed: int, blocks: list[int], k: int = 3, bs: int = 4, mml: int = 64, rejected: int = 0):
    """One decode that verified k drafts and accepted ``k - rejected`` of them."""
    cfg = ProposerConfig(k, 96, bs, mml, 16, 4, 8)
    sampled = [1 + i for i in range(k + 1 - rejected)] + [-1] * rejected
    req = RequestCase(
        tokens=[5 + i for i in range(k + 2)],
        num_computed=num_computed,
        query_len=k + 1,
        num_drafts=k,
        sampled=sampled,
        discarded=False,
        blocks=blocks,
    )
    return BatchCase(cfg, [req], seed=0)
