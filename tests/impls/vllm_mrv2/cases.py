"""Shared helpers of the MRV2 differential tests: the core's and MRV2's view of one case."""

from __future__ import annotations

from mtp.config import ProposerConfig
from sim.impls.vllm_mrv2.adapter import Mrv2Ops
from sim.oracle.cases import BatchCase, RequestCase, slot_of
from tests.impls import suites

MRV2 = Mrv2Ops()


def both(case: BatchCase, padded: bool = True):
    """(batch, sampled, core's PreparedCall, MRV2's PreparedCall) of one case."""
    return suites.both(case, padded, MRV2)


def mrv2_step_expected(case: BatchCase, accepted_seq_lens: list[int], j: int):
    """Step ``j`` as MRV2's kernels define it (divergence overflow-clamp), restated by hand: the position
    advances from the sample row and stops at max_model_len - 1, seq_len stops at max_model_len, and the
    slot is always that (clamped) position's."""
    mml, size = case.config.max_model_len, case.config.block_size
    out = ([], [], [])
    for req, acc in zip(case.requests, accepted_seq_lens):
        pos, seq = min(acc - 1 + j - 1, mml - 1), min(acc + j - 1, mml)
        for lst, v in zip(out, (pos, seq, slot_of(req.blocks, pos, size))):
            lst.append(v)
    return out


def decode_case(max_model_len: int, num_computed: int, k: int, accepted: int, blocks=(3, 1, 4, 0, 2)) -> BatchCase:
    """One decode request: ``num_computed`` tokens in KV, K drafts verified, ``accepted`` of them accepted."""
    cfg = ProposerConfig(
        num_spec_tokens=k, block_size=4, max_model_len=max_model_len, max_num_reqs=4, max_num_tokens=64,
        hidden_size=32, vocab_size=96,
    )  # fmt: skip
    sampled = [11 + i for i in range(accepted + 1)] + [-1] * (k - accepted)
    req = RequestCase(
        tokens=[20 + i for i in range(k + 2)], num_computed=num_computed, query_len=k + 1, num_drafts=k,
        sampled=sampled, discarded=False, blocks=list(blocks),
    )  # fmt: skip
    return BatchCase(config=cfg, requests=[req], seed=0)
