"""Shared helpers of the vllm-ascend differential tests: both views of one case."""

from __future__ import annotations

from sim.impls.vllm_ascend.adapter import AscendOps
from sim.oracle.cases import BatchCase
from tests.impls import suites

ASCEND, ASCEND_TRITON = AscendOps(triton=False), AscendOps()


def both(case: BatchCase, padded: bool, ops: AscendOps = ASCEND):
    """(batch, sampled, core's PreparedCall, vllm-ascend's PreparedCall) of one case."""
    return suites.both(case, padded, ops)
