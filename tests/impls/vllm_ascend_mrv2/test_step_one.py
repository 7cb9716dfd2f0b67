"""Step 1: the runner's counts (vLLM's get_num_sampled_and_rejected) and post_update's last sampled token."""

from __future__ import annotations

from sim.impls.kit.ascend.importing import import_ascend
from tests.impls import suites
from tests.impls.vllm_ascend_mrv2.cases import OPS, both
from tests.impls.vllm_mrv2.cases import decode_case


def test_last_sampled_is_taken_unfiltered():
    """unfiltered-last-sampled: vLLM's post_update, the one vllm-ascend's MRV2 runner runs, takes
    sampled[num_sampled - 1] as it is: an id past the vocabulary becomes the next token."""
    suites.assert_last_sampled_taken_unfiltered(import_ascend("vllm.v1.worker.gpu.input_batch"), decode_case)


def test_a_request_that_sampled_nothing_rejects_its_last_row():
    """unsampled-row-rejected: a prefill whose sampled row is all placeholders rejects its last row and
    samples the row before it (MRV2's counts); the core rejects nothing."""
    suites.assert_unsampled_row_rejected(OPS, decode_case)


def test_a_partial_prefill_continues_from_its_next_prompt_token():
    """A discarded sample (chunked prefill) counts nothing sampled and nothing rejected, and the prefill
    kernel takes next_prefill_tokens: the core's backup."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=2)
    req = case.requests[0]._replace(num_drafts=0, query_len=4, sampled=[7, -1, -1, -1], discarded=True)
    _, sampled, core, got = both(case._replace(requests=[req]))
    assert got.next.valid_counts.tolist() == [0] and got.first.num_rejected.tolist() == [0]
    assert got.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [int(sampled.backup[0])]
