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
