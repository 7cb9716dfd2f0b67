"""Step 1 (next token, valid count): vLLM's prepare_next_token_ids_* against the core."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.kit import vllm_interop as interop
from sim.impls.kit.vllm_eagle import configured
from sim.oracle.cases import to_batch
from tests.impls import suites
from tests.impls.suites import CORE, CPU
from tests.impls.vllm.cases import VLLM
from tests.strategies.batches import batch_cases


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_next_tokens_match_core(padded, case):
    """With the batch's own backup as the last known token, vLLM and the core agree everywhere."""
    suites.assert_next_tokens_match_core(VLLM, case, padded)


@given(case=batch_cases())
def test_backup_token_divergence(case):
    """backup-token: for a real runner state (a partial prefill's prompt runs past seq_len), the padded
    path continues from the last prompt token; the unpadded path and the core from the token at seq_len.
    Exactly the discarded requests differ."""
    cfg = case.config
    p = configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size)

    def padded(batch, sampled, s):
        return p.prepare_next_token_ids_padded(sampled.padded, s.requests, s.input_batch, s.discard_mask)[0]

    _, step_one, core = suites.assert_backup_token(case, padded)
    # Unpadded: vLLM asks for the token at seq_len, as the core does.
    unpadded = to_batch(case, CPU, False)[1]
    lists = [[] if d else ids for ids, d in zip(unpadded.lists, unpadded.discarded)]
    got = p.prepare_next_token_ids_cpu(lists, step_one.requests, step_one.input_batch, step_one.num_scheduled)
    assert got.tolist() == core


def test_unpadded_lists_are_not_filtered():
    """unpadded-no-filter: vLLM takes a list's last entry as is; the core refuses it before any work."""
    cfg_case = suites.one_decode(vocab=16, sampled=[3, 99])
    batch, sampled = to_batch(cfg_case, CPU, padded=False)
    sampled.lists = [[3, 99]]  # 99 >= vocab: not a token id
    step_one = interop.to_step_one_inputs(batch, sampled, 16)
    p = configured(2, 4, 64, 8)
    got = p.prepare_next_token_ids_cpu(sampled.lists, step_one.requests, step_one.input_batch, step_one.num_scheduled)
    assert got.tolist() == [99]
    with pytest.raises(ValueError, match=r"sampled_token_ids\[0\]\[1\]=99"):
        CORE.prepare_call(cfg_case.config, batch, sampled)
    sampled.lists = [[3, -1]]
    assert p.prepare_next_token_ids_cpu(sampled.lists, step_one.requests, step_one.input_batch, {"r0": 3}).tolist() == [
        -1
    ]


def test_step_one_torch_dtypes():
    """vLLM's step 1 returns int32 ids and counts, as the core does."""
    case = suites.one_decode(16, [3, 4])
    batch, sampled = to_batch(case, CPU, padded=True)
    got = VLLM._next_tokens(case.config, batch, sampled)
    assert got.next_token_ids.dtype == torch.int32 and got.valid_counts.dtype == torch.int32
