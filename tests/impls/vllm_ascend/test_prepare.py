"""Steps 2-3: vllm-ascend's prepare_inputs_padded (Triton kernel in the interpreter, and its torch
fallback) / prepare_inputs and the first-pass shift against the core."""

from __future__ import annotations

import pytest
from hypothesis import given

from sim.impls.kit import kernel_grid
from sim.impls.kit.ascend import interop
from sim.impls.vllm_ascend import generation
from sim.impls.vllm_ascend.build import configured
from sim.oracle.cases import to_batch
from tests.checks.known_defects import pin
from tests.impls import suites
from tests.impls.suites import CPU
from tests.impls.vllm_ascend.cases import ASCEND, ASCEND_TRITON, both
from tests.strategies.batches import batch_cases

FIELDS = ("token_indices", "query_start_loc", "seq_lens", "slot_mapping", "sample_indices", "num_rejected")


@pytest.mark.parametrize("ops", [ASCEND, ASCEND_TRITON], ids=["torch", "triton"])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases(max_reqs=16))
def test_prepare_matches_core(padded, ops, case):
    """Every first-pass field but the documented ones is the core's, on both of vllm-ascend's paths."""
    _, _, core, got = both(case, padded, ops)
    suites.assert_first_pass_matches_core(core, got, FIELDS)
    if padded:
        assert got.first.max_query_len == core.first.max_query_len


def launching_module():
    """The vllm-ascend module whose ``prepare_inputs_padded`` launches the kernel."""
    return generation.base_module()


class Counting:
    """``prepare_inputs_padded_kernel`` that records the grid of every launch."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def test_triton_kernel_runs_in_the_interpreter(monkeypatch):
    """The Triton path really launches vllm-ascend's prepare_inputs_padded_kernel (not the fallback)."""
    module = launching_module()
    counting = Counting(module.prepare_inputs_padded_kernel)
    grids = counting.grids
    monkeypatch.setattr(module, "prepare_inputs_padded_kernel", counting)
    case = suites.one_decode(16, [3, -1])
    batch, sampled = to_batch(case, CPU, padded=True)
    got = ASCEND_TRITON.prepare_call(case.config, batch, sampled)
    assert grids == [(1,)] and got.first.sample_indices.tolist() == [0]
    ASCEND.prepare_call(case.config, batch, sampled)
    assert len(grids) == 1  # the torch fallback launches nothing


@given(case=batch_cases(max_reqs=16))
def test_every_program_laps_past_one_tile(case):
    """On the grid the adapter launches (kernel_grid), each program of a launch with more than one
    tile walks two tiles or more, so the kernel's grid-stride loop runs as it would past ~100
    requests on an NPU's vector cores."""
    module = launching_module()
    counting = Counting(module.prepare_inputs_padded_kernel)
    batch, sampled = to_batch(case, CPU, padded=True)
    module.prepare_inputs_padded_kernel = counting
    try:
        ASCEND_TRITON.prepare_call(case.config, batch, sampled)
    finally:
        module.prepare_inputs_padded_kernel = counting.kernel
    ((programs,),) = counting.grids
    tiles = -(-batch.num_reqs // kernel_grid.tile_size(module))
    assert programs >= 1 and (tiles == 1 or tiles >= 2 * programs), (programs, tiles)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_padded_seq_lens_not_lowered_first_pass(padded, case):
    """padded-seq-lens-not-lowered: what vllm-ascend's later steps start from is seq_len in padded mode
    (the core: seq_len - n_rej); unpadded, prepare_inputs has lowered it and both agree."""
    batch, _, core, got = both(case, padded)
    want = batch.seq_lens.tolist() if padded else core.first.accepted_seq_lens.tolist()
    assert got.first.accepted_seq_lens.tolist() == want
    rejected = any(n > 0 for n in core.first.num_rejected.tolist())
    assert (got.first.accepted_seq_lens.tolist() != core.first.accepted_seq_lens.tolist()) == (padded and rejected)


@given(case=batch_cases())
def test_unpadded_max_query_len_divergence(case):
    """unpadded-max-query-len: the original longest query, not the compacted one."""
    batch, _, core, got = both(case, padded=False)
    original, compacted = int(batch.query_lens_cpu.max()), int(core.first.max_query_len)
    longest = got.first.max_query_len
    pin("unpadded-max-query-len", longest == original, longest == compacted, f"got {longest}, {original} / {compacted}")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_stale_last_row_divergence(padded, case):
    """stale-last-row: ids are the core's on every row but the batch's last when it is a rejected token."""
    suites.assert_stale_last_row(ASCEND, case, padded, lambda hidden: configured(2, 16, 64, hidden).input_ids)


@given(case=batch_cases())
def test_prepare_inputs_rewrites_caller_slot_mapping(case):
    """slot-mapping-in-place: prepare_inputs compacts the caller's slot_mapping tensor itself."""
    batch, sampled = to_batch(case, CPU, padded=False)
    cfg = case.config
    p = configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size)
    suites.assert_caller_slot_mapping_compacted(p, interop.to_ascend_metadata(batch), batch, sampled)


def test_every_named_host_read_is_made():
    from sim.impls.vllm_ascend.branch_divergences import in_force

    suites.assert_every_host_read_made(ASCEND_TRITON, in_force(generation.name()).HOST_READS)
