"""Shared helpers of the vllm-ascend MRV2 differential tests: its ops, the generation, hand-made cases."""

from __future__ import annotations

import pytest

from sim.impls.vllm_ascend_mrv2 import divergences, generation
from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Ops
from sim.oracle.cases import BatchCase, slot_of
from tests.impls import suites

OPS = AscendMrv2Ops()


def rules():
    """The rules of the generation installed (``divergences.in_force``)."""
    return divergences.in_force(generation.name()).RULES


def only_where_it_is(divergence_id: str) -> None:
    """Skip, naming why, unless the installed generation has the divergence (``divergences.GENERATION``)."""
    where = divergences.GENERATION[divergence_id]
    if generation.name() not in where:
        pytest.skip(
            f"{divergence_id} is vllm-ascend {', '.join(where)}'s (divergences.GENERATION); this is {generation.name()}"
        )


def both(case: BatchCase, padded: bool = True):
    """(batch, sampled, core's PreparedCall, the speculator's PreparedCall) of one case."""
    return suites.both(case, padded, OPS)


def steps(case: BatchCase):
    """Each draft step j = 2..K of the ops: (positions, seq_lens, slots) per request, and the prepared call."""
    batch, _, _, got = both(case)
    out = []
    for j in range(2, case.config.num_spec_tokens + 1):
        meta = OPS.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        out.append((meta.positions.tolist(), meta.seq_lens.tolist(), meta.slot_mapping.tolist()))
    return out, got


def clamped(case: BatchCase, accepted: list[int], j: int) -> tuple[list[int], list[int]]:
    """Step ``j``'s positions and slots as MRV2's kernels define them (overflow-clamp), restated by hand:
    the position advances from the last accepted one and stops at max_model_len - 1, the slot is always
    that position's."""
    mml, size = case.config.max_model_len, case.config.block_size
    pos = [min(a - 1 + j - 1, mml - 1) for a in accepted]
    return pos, [slot_of(req.blocks, p, size) for req, p in zip(case.requests, pos)]
