"""Steps 2-3: vLLM's prepare_inputs_padded / prepare_inputs and first-pass shift against the core."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.vllm import interop
from sim.impls.vllm.eagle import configured, eagle_proposer
from sim.oracle.cases import to_batch
from tests.impls.suites import assert_every_host_read_made
from tests.impls.vllm.cases import CORE, CPU, VLLM, both
from tests.strategies.batches import batch_cases

FIELDS = ("token_indices", "query_start_loc", "seq_lens", "accepted_seq_lens", "slot_mapping", "sample_indices")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_prepare_matches_core(padded, case):
    """Every first-pass field but the two documented ones is the core's."""
    _, _, core, vllm = both(case, padded)
    for name in FIELDS + ("num_rejected",):
        assert getattr(vllm.first, name).tolist() == getattr(core.first, name).tolist(), name
    assert vllm.base_positions.tolist() == core.base_positions.tolist()
    if padded:
        assert vllm.first.max_query_len == core.first.max_query_len


@given(case=batch_cases())
def test_unpadded_max_query_len_divergence(case):
    """unpadded-max-query-len: vLLM reports the original longest query; it differs from the core's
    compacted one exactly where rejections shortened every longest query."""
    batch, _, core, vllm = both(case, padded=False)
    original = int(batch.query_lens_cpu.max())
    assert vllm.first.max_query_len == original
    compacted = max(r.query_len - n for r, n in zip(case.requests, core.first.num_rejected.tolist()))
    assert core.first.max_query_len == compacted
    assert (vllm.first.max_query_len != core.first.max_query_len) == (compacted != original)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_stale_last_row_divergence(padded, case):
    """stale-last-row: the first-pass ids are the core's on every row but the batch's last one when that
    row is a rejected token (padded mode only); vLLM leaves the buffer's old value there."""
    batch, sampled = to_batch(case, CPU, padded)
    mine = VLLM.prepare_call(case.config, batch, sampled)  # vLLM's prepared call ...
    want = CORE.prepare_call(case.config, batch, sampled).input_ids.tolist()
    eagle_proposer(case.config.hidden_size).input_ids.fill_(-7)  # ... re-run on a marked buffer
    got = VLLM.first_pass_input_ids(batch, mine.first, mine.next).tolist()
    last = len(got) - 1
    stale = last not in mine.first.sample_indices.tolist()
    assert stale == (padded and int(mine.first.num_rejected[-1]) > 0)
    assert got[:last] == want[:last]
    assert got[last] == (-7 if stale else want[last])


def test_cpu_seq_lens_alias():
    """cpu-seq-lens-alias: on CPU, prepare_inputs returns seq_lens as the very tensor of its host bound."""
    from tests.impls.vllm.test_step_one import _one_decode

    case = _one_decode(16, [3])
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

    assert_every_host_read_made(VLLM, HOST_READS)
