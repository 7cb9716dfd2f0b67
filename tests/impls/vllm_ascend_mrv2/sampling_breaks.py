"""vLLM's MRV2 runner sampling half, which vllm-ascend's MRV2 runner inherits, broken as a regression there would
break it (``broken_gate.VARIANTS``, under ``Scenario.runner_samples``): each takes the original method and returns the
broken one.

- ``output_copied_before_the_sampler_finishes``: ``AsyncOutput`` copying the sampled tokens and their counts to the
  host without its copy stream waiting for the stream that sampled them (vllm-ascend#9456's class): the scheduler is
  reported what the copy read before the sampler wrote it.
- ``drafts_kept_at_the_batch_rows``: ``sample_tokens`` keeping each request's drafts at its batch row of the request
  states' ``draft_tokens``, not its request-state row: the next step verifies another request's drafts.
- ``reported_sampled_tokens_one_short``: ``AsyncOutput.get_output`` keeping one sampled token fewer than the counts
  say: the scheduler books every request's last sampled token (the bonus, or the target's at the rejection) as never
  sampled.

Written otherwise, and right (controls: the gate must pass them): ``output_copy_ordered_by_an_event``, the copy stream
waiting for an event the sampling stream recorded, not for the stream itself; ``drafts_kept_by_index_copy``, the
drafts written into their request-state rows with ``index_copy_``.
"""

from __future__ import annotations

from tests.impls.fixes import edited


def output_copied_before_the_sampler_finishes(init):
    return edited(init, ("copy_stream.wait_stream(main_stream)", "pass"))


def drafts_kept_at_the_batch_rows(sample_tokens):
    return edited(
        sample_tokens,
        (
            "self.req_states.draft_tokens[input_batch.idx_mapping] = draft_tokens",
            "self.req_states.draft_tokens[: input_batch.num_reqs] = draft_tokens",
        ),
    )


def reported_sampled_tokens_one_short(get_output):
    return edited(get_output, ("del token_ids[num_tokens:]", "del token_ids[max(num_tokens - 1, 0) :]"))


def output_copy_ordered_by_an_event(init):
    return edited(
        init,
        (
            "copy_stream.wait_stream(main_stream)",
            "sampled_event = torch.cuda.Event()\n            sampled_event.record(main_stream)\n"
            "            copy_stream.wait_event(sampled_event)",
        ),
    )


def drafts_kept_by_index_copy(sample_tokens):
    return edited(
        sample_tokens,
        (
            "self.req_states.draft_tokens[input_batch.idx_mapping] = draft_tokens",
            "self.req_states.draft_tokens.index_copy_(0, input_batch.idx_mapping, draft_tokens)",
        ),
    )
