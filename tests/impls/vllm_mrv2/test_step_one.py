"""Step 1: the runner's counts (get_num_sampled_and_rejected) and post_update's last sampled token."""

from __future__ import annotations

from sim.impls.kit import vllm_interop as interop
from tests.impls import suites
from tests.impls.vllm_mrv2.cases import MRV2, both, decode_case


def test_last_sampled_is_taken_unfiltered():
    """unfiltered-last-sampled: MRV2's post_update takes sampled[num_sampled - 1] as it is: an id past the
    vocabulary (96 + 3) inside the sampler's count becomes the next token; the core would skip it."""
    suites.assert_last_sampled_taken_unfiltered(interop.import_vllm("vllm.v1.worker.gpu.input_batch"), decode_case)


def test_a_partial_prefill_continues_from_its_next_prompt_token():
    """A discarded sample (chunked prefill: seq_len < prefill_len) counts nothing sampled and nothing
    rejected, and the prefill kernel takes next_prefill_tokens: the core's backup."""
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=2)
    req = case.requests[0]._replace(num_drafts=0, query_len=4, sampled=[7, -1, -1, -1], discarded=True)
    case = case._replace(requests=[req])
    _, sampled, core, mrv2 = both(case)
    assert mrv2.next.valid_counts.tolist() == [0] and mrv2.first.num_rejected.tolist() == [0]
    assert mrv2.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [int(sampled.backup[0])]


def test_a_request_that_sampled_nothing_rejects_its_last_row():
    """unsampled-row-rejected: a prefill of 4 rows (no drafts verified) whose sampled row is all placeholders:
    the core rejects nothing and samples its last row; MRV2 counts one logit minus none sampled as one
    rejected row and samples the row before it. Both continue from the backup."""
    suites.assert_unsampled_row_rejected(MRV2, decode_case)
