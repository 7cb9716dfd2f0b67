"""Where vllm-ascend 0.23.0 overrides vLLM 0.23.0's proposer, the upstream method on the same proposer.

``AscendEagleProposer`` subclasses vLLM's ``SpecDecodeBaseProposer`` and
overrides step 1 (discard indices and a count instead of a mask) and steps
2-3 (``prepare_inputs_padded``, ``prepare_inputs``). Calling vLLM's own
method on the same object and the same inputs shows what each override keeps
and what it changes; ``_propose`` replaces upstream's ``propose``, whose
``cad.seq_lens -= num_rejected`` is the line the override drops
(``padded-seq-lens-not-lowered``, pinned in test_steps.py and test_propose.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.kit.ascend import interop
from sim.impls.kit.signatures import takes
from sim.impls.vllm_ascend import generation
from sim.impls.vllm_ascend.adapter import _proposer, next_tokens, prepare_inputs
from sim.oracle.cases import to_batch
from tests.impls.suites import CPU
from tests.strategies.batches import batch_cases


def _upstream():
    """The vLLM proposer the checkout's base class subclasses (vLLM's ``SpecDecodeBaseProposer``; vLLM 0.18's
    ``EagleProposer`` on releases/v0.18.0)."""
    return generation.base_proposer().__bases__[0]


@given(case=batch_cases(max_reqs=16))
def test_next_tokens_override_equals_upstream(case):
    """Step 1, padded: discard indices and a count give what upstream's discard mask gives."""
    batch, sampled = to_batch(case, CPU, padded=True)
    p = _proposer(case.config)
    got = next_tokens(p, batch, sampled, case.config.vocab_size)
    step_one = interop.to_step_one_inputs(batch, sampled, case.config.vocab_size)
    upstream = _upstream().prepare_next_token_ids_padded
    head = (interop.to_ascend_metadata(batch),) if takes(upstream, "common_attn_metadata") else ()  # vLLM 0.18's
    ids, counts = upstream(p, *head, sampled.padded, step_one.requests, step_one.input_batch, step_one.discard_mask)
    assert got.next_token_ids.tolist() == ids.tolist()
    assert got.valid_counts.tolist() == counts.tolist()


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases(max_reqs=16))
def test_prepare_override_equals_upstream(padded, case):
    """Steps 2-3: the spec metadata, rows, sample rows and rejected counts of the override equal
    upstream's on fresh copies of the same metadata (the override keeps upstream's semantics)."""
    batch, sampled = to_batch(case, CPU, padded)
    p = _proposer(case.config)
    counts = next_tokens(p, batch, sampled, case.config.vocab_size).valid_counts
    cad, rows, sample, rejected = prepare_inputs(p, batch, sampled, counts, triton=False)
    fresh = interop.to_ascend_metadata(batch)
    if padded:
        up_cad, up_sample, up_rejected = _upstream().prepare_inputs_padded(
            p, fresh, interop.to_spec_decode_metadata(batch), counts
        )
        assert sample.tolist() == up_sample.tolist()
        assert rejected.tolist() == up_rejected.tolist()
        assert rows.tolist() == list(range(batch.num_tokens))
    else:
        lists = [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]
        up_cad, up_rows = _upstream().prepare_inputs(p, fresh, lists, [int(k) for k in batch.num_draft_tokens_cpu])
        assert rows.tolist() == up_rows.tolist()
    n = cad.num_actual_tokens
    assert n == up_cad.num_actual_tokens
    for name in ("query_start_loc", "seq_lens"):
        assert torch.equal(getattr(cad, name), getattr(up_cad, name)), name
    assert cad.slot_mapping[:n].tolist() == up_cad.slot_mapping[:n].tolist()
