"""Steps 2-3: vLLM's prepare_inputs_padded / prepare_inputs and first-pass shift against the core."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.kit import vllm_interop as interop
from sim.impls.kit.vllm_eagle import configured, eagle_proposer
from sim.oracle.cases import to_batch
from tests.checks.known_defects import pin
from tests.impls import suites
from tests.impls.suites import CPU
from tests.impls.vllm.cases import VLLM, both
from tests.strategies.batches import batch_cases

FIELDS = ("token_indices", "query_start_loc", "seq_lens", "accepted_seq_lens", "slot_mapping", "sample_indices")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_prepare_matches_core(padded, case):
    """Every first-pass field but the two documented ones is the core's."""
    _, _, core, vllm = both(case, padded)
    suites.assert_first_pass_matches_core(core, vllm, FIELDS + ("num_rejected",))
    if padded:
        assert vllm.first.max_query_len == core.first.max_query_len


@given(case=batch_cases())
def test_unpadded_max_query_len_divergence(case):
    """unpadded-max-query-len: vLLM reports the original longest query; it differs from the core's
    compacted one exactly where rejections shortened every longest query."""
    batch, _, core, vllm = both(case, padded=False)
    original = int(batch.query_lens_cpu.max())
    compacted = max(r.query_len - n for r, n in zip(case.requests, core.first.num_rejected.tolist()))
    assert core.first.max_query_len == compacted
    longest = vllm.first.max_query_len
    pin("unpadded-max-query-len", longest == original, longest == compacted, f"got {longest}, {original} / {compacted}")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_stale_last_row_divergence(padded, case):
    """stale-last-row: the first-pass ids are the core's on every row but the batch's last one when that
    row is a rejected token (padded mode only); vLLM leaves the buffer's old value there."""
    suites.assert_stale_last_row(VLLM, case, padded, lambda hidden: eagle_proposer(hidden).input_ids)


def test_cpu_seq_lens_alias():
    """cpu-seq-lens-alias: on CPU, prepare_inputs returns seq_lens as the very tensor of its host bound."""
    case = suites.one_decode(16, [3])
    batch, sampled = to_batch(case, CPU, padded=False)
    p = configured(2, 4, 64, 8)
    spec_cad, _ = p.prepare_inputs(interop.to_common_attn_metadata(batch), sampled.lists, [2])
    assert spec_cad.seq_lens is spec_cad.seq_lens_cpu_upper_bound
    assert spec_cad.seq_lens.tolist() == [batch.seq_lens_cpu[0] - 2]
    before = spec_cad.seq_lens.clone()
    spec_cad.seq_lens_cpu_upper_bound += 1  # what propose() does per step, beside the kernel's own +1
    assert spec_cad.seq_lens.tolist() == (before + 1).tolist()
    assert isinstance(spec_cad.seq_lens, torch.Tensor)


def test_every_named_host_read_is_made():
    from sim.impls.vllm.divergences import HOST_READS

    suites.assert_every_host_read_made(VLLM, HOST_READS)
