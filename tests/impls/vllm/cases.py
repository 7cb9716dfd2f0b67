"""Shared helpers of the vLLM differential tests: the core's and vLLM's view of one case."""

from __future__ import annotations

from sim.impls.vllm.adapter import VllmOps
from sim.oracle.cases import BatchCase, slot_of
from tests.impls import suites

VLLM = VllmOps()


def both(case: BatchCase, padded: bool):
    """(batch, sampled, core's PreparedCall, vLLM's PreparedCall) of one case."""
    return suites.both(case, padded, VLLM)


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
