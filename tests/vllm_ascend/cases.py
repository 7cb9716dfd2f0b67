"""Shared helpers of the vllm-ascend differential tests: both views of one case, vllm-ascend's step rule."""

from __future__ import annotations

import torch

from mtp.ops import CoreOps
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.oracle.cases import BatchCase, slot_of, to_batch

CPU = torch.device("cpu")
CORE, ASCEND, ASCEND_TRITON = CoreOps(), AscendOps(), AscendOps(triton=True)


def both(case: BatchCase, padded: bool, ops: AscendOps = ASCEND):
    """(batch, sampled, core's PreparedCall, vllm-ascend's PreparedCall) of one case."""
    batch, sampled = to_batch(case, CPU, padded)
    return batch, sampled, CORE.prepare_call(case.config, batch, sampled), ops.prepare_call(case.config, batch, sampled)


def ascend_step_expected(case: BatchCase, start_seq_lens: list[int], accepted: list[int], j: int):
    """Step ``j`` as vllm-ascend 0.23 computes it: the position advances from the sample row (0, slot -1
    once it reaches max_model_len); seq_len advances from ``start_seq_lens`` (padded: not lowered by the
    rejected count) and is set to 1 when it passes max_model_len, then advances again from there."""
    cfg = case.config
    out = ([], [], [])
    for req, seq, acc in zip(case.requests, start_seq_lens, accepted):
        pos = acc - 1
        for _ in range(j - 1):
            pos += 1
            seq = 1 if seq + 1 > cfg.max_model_len else seq + 1
        overflow = pos >= cfg.max_model_len
        for lst, v in zip(
            out, (0 if overflow else pos, seq, -1 if overflow else slot_of(req.blocks, pos, cfg.block_size))
        ):
            lst.append(v)
    return out
