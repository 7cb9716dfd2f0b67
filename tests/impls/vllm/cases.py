"""Shared helpers of the vLLM differential tests: the core's and vLLM's view of one case."""

from __future__ import annotations

import torch

from mtp.ops import CoreOps
from sim.impls.vllm.adapter import VllmOps
from sim.oracle.cases import BatchCase, slot_of, to_batch

CPU = torch.device("cpu")
CORE, VLLM = CoreOps(), VllmOps()


def both(case: BatchCase, padded: bool):
    """(batch, sampled, core's PreparedCall, vLLM's PreparedCall) of one case."""
    batch, sampled = to_batch(case, CPU, padded)
    return (
        batch,
        sampled,
        CORE.prepare_call(case.config, batch, sampled),
        VLLM.prepare_call(case.config, batch, sampled),
    )


def vllm_step_expected(case: BatchCase, accepted_seq_lens: list[int], j: int):
    """Step ``j`` as vLLM V1 defines it (divergence overflow-restart): positions
    advance from the sample row, the first one reaching max_model_len goes to 0
    (seq_len 1, slot -1) and the next ones continue from there with real slots."""
    cfg = case.config
    out = ([], [], [])
    for req, acc in zip(case.requests, accepted_seq_lens):
        pos, seq, slot = acc - 1, acc, -1
        for _ in range(j - 1):
            pos += 1
            if pos >= cfg.max_model_len:
                pos, seq, slot = 0, 1, -1
            else:
                seq = min(seq + 1, cfg.max_model_len)
                slot = slot_of(req.blocks, pos, cfg.block_size)
        for lst, v in zip(out, (pos, seq, slot)):
            lst.append(v)
    return out
