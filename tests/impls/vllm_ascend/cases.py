"""Shared helpers of the vllm-ascend differential tests: both views of one case."""

from __future__ import annotations

import torch

from mtp.ops import CoreOps
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.oracle.cases import BatchCase, to_batch

CPU = torch.device("cpu")
CORE, ASCEND, ASCEND_TRITON = CoreOps(), AscendOps(triton=False), AscendOps()


def both(case: BatchCase, padded: bool, ops: AscendOps = ASCEND):
    """(batch, sampled, core's PreparedCall, vllm-ascend's PreparedCall) of one case."""
    batch, sampled = to_batch(case, CPU, padded)
    return batch, sampled, CORE.prepare_call(case.config, batch, sampled), ops.prepare_call(case.config, batch, sampled)
