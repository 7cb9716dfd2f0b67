"""Step 1: the runner's counts (get_num_sampled_and_rejected) and post_update's last sampled token."""

from __future__ import annotations

import torch

from sim.impls.vllm import interop
from sim.oracle import reference
from tests.impls.vllm_mrv2.cases import both, decode_case


def test_last_sampled_is_taken_unfiltered():
    """unfiltered-last-sampled: MRV2's post_update takes sampled[num_sampled - 1] as it is: an id past the
    vocabulary (96 + 3) inside the sampler's count becomes the next token; the core would skip it."""
    ib = interop.import_vllm("vllm.v1.worker.gpu.input_batch")
    rows = torch.tensor([[5, 96 + 3, -1, -1]], dtype=torch.int64)
    last = torch.zeros(1, 1, dtype=torch.int64)
    ib.post_update(
        torch.tensor([0]), torch.zeros(1, dtype=torch.int32), last, None, rows,
        torch.tensor([2], dtype=torch.int32), torch.tensor([2], dtype=torch.int32), None,
        torch.zeros(1, 4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
    )  # fmt: skip
    assert last.tolist() == [[99]]
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    case = case._replace(requests=[case.requests[0]._replace(sampled=[5, 99, -1, -1])])
    assert reference.next_token(case.requests[0], 96) == (5, 1)  # the core's filter


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
    case = decode_case(max_model_len=64, num_computed=0, k=3, accepted=0)
    req = case.requests[0]._replace(num_drafts=0, query_len=4, sampled=[-1, -1, -1, -1])
    _, sampled, core, mrv2 = both(case._replace(requests=[req]))
    assert core.first.num_rejected.tolist() == [0] and core.first.sample_indices.tolist() == [3]
    assert mrv2.first.num_rejected.tolist() == [1] and mrv2.first.sample_indices.tolist() == [2]
    assert mrv2.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [int(sampled.backup[0])]
