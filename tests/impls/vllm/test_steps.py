"""Step 4: vLLM's per-step kernel (eagle_step_update_slot_mapping_and_metadata) against the core."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.kit import vllm_interop as interop
from tests.impls import suites
from tests.impls.vllm.cases import VLLM, vllm_step_expected
from tests.strategies.batches import batch_cases


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_overflow_restart_divergence(padded, case):
    """overflow-restart: positions, seq_lens and slots are the core's on every request whose position has
    not overflowed in an EARLIER step; on the others vLLM continues from 0 with real slots (the V1 rule)."""
    mml = case.config.max_model_len
    restarted = lambda b, j: b + j - 2 >= mml  # noqa: E731 - an earlier step already reached max_model_len
    suites.assert_steps_match(VLLM, case, padded, vllm_step_expected, restarted)


def test_clamp_divergence():
    """clamps: with a block table narrower than the positions need, vLLM uses its last column and clamps
    seq_len to max_model_len; the core refuses such a batch (validate_batch)."""
    utils = interop.import_vllm("vllm.v1.spec_decode.utils")
    positions = torch.tensor([5, 9], dtype=torch.int64)
    seq_lens = torch.tensor([6, 16], dtype=torch.int32)  # request 1: seq_len already at max_model_len
    table = torch.tensor([[3, 8], [4, 6]], dtype=torch.int32)  # 2 blocks of 4: positions 0..7
    out_pos, slots = torch.empty(2, dtype=torch.int64), torch.empty(2, dtype=torch.int64)
    utils.eagle_step_update_slot_mapping_and_metadata(
        positions_1d=positions,
        block_table_tensor=table,
        seq_lens=seq_lens,
        block_size=4,
        max_model_len=16,
        out_clamped_positions=out_pos,
        out_slot_mapping=slots,
    )
    assert out_pos.tolist() == [6, 10]
    assert slots.tolist() == [8 * 4 + 2, 6 * 4 + 2]  # position 10 -> block index 2, clamped to column 1
    assert seq_lens.tolist() == [7, 16]  # 16 + 1 clamped to max_model_len
