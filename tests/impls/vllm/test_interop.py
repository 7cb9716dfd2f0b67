"""sim.impls.vllm.interop: the core's metadata survives a round trip through vLLM's types."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given

from sim.impls.vllm import interop
from sim.oracle.cases import to_batch
from tests.impls.vllm.cases import CORE, CPU
from tests.strategies.batches import batch_cases


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.as_tensor(a).tolist() == torch.as_tensor(b).tolist()
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


@given(case=batch_cases())
def test_verified_batch_round_trip(case):
    batch, _ = to_batch(case, CPU, padded=True)
    cad, spec = interop.to_common_attn_metadata(batch), interop.to_spec_decode_metadata(batch)
    assert spec.num_draft_tokens == batch.num_draft_tokens_cpu.tolist()
    assert cad.seq_lens is not batch.seq_lens  # vLLM lowers seq_lens in place: never the caller's tensor
    back = interop.from_vllm_metadata(cad, spec, batch.token_ids, batch.positions, batch.hidden_states)
    for name in batch.__dataclass_fields__:
        assert _same(getattr(back, name), getattr(batch, name)), name


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_first_pass_round_trip(padded, case):
    batch, sampled = to_batch(case, CPU, padded)
    first = CORE.prepare_call(case.config, batch, sampled).first
    cad = interop.first_pass_to_common_attn_metadata(first, batch)
    assert cad.num_actual_tokens == first.num_tokens and cad.max_query_len == first.max_query_len
    back = interop.first_pass_from_vllm(
        cad, first.token_indices, first.sample_indices, first.num_rejected, case.config.max_num_tokens, padded
    )
    for name in first.__dataclass_fields__:
        got, want = getattr(back, name), getattr(first, name)
        if name == "query_start_loc_cpu" and want is None:
            continue
        assert _same(got, want), name


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_sampled_tokens_round_trip(padded, case):
    batch, sampled = to_batch(case, CPU, padded)
    step_one = interop.to_step_one_inputs(batch, sampled, case.config.vocab_size)
    back = interop.from_step_one_inputs(step_one, batch, sampled.padded)
    assert _same(back.discarded, sampled.discarded) and _same(back.backup, sampled.backup)
    if padded:
        assert back.padded is sampled.padded
    else:  # a discarded request's list is emptied, as vLLM's runner does
        assert back.lists == [[] if d else ids for ids, d in zip(sampled.lists, sampled.discarded)]
