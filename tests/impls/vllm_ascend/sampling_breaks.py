"""Broken sampling halves of vllm-ascend's runner iteration (``Scenario.runner_samples``), as a
regression there would bring them: each takes the original method and returns the broken one.

``bonus_of_the_last_draft`` is a ``_calc_spec_decode_metadata`` whose bonus rows are one early: the
rejection sampler reads a request's bonus token at its last draft's row (a request without drafts: at
the previous request's last row). ``discarded_samples_booked`` is a ``_bookkeeping_sync`` that forgets
the discarded requests: a chunked prompt's throwaway sample is reported to the scheduler and booked as
its next token. ``books_a_token_short`` one that counts a token too few of what it booked
(``num_tokens_no_spec``): nothing the drafter reads in that step changes, only what the runner holds.

Under asynchronous scheduling: ``events_left_placeholders`` is a runner whose ``_torch_cuda_wrapper``
leaves torch's and torch.cuda's event classes a placeholder that waits for nothing (0.23.0's leaves
``torch.cuda.Event`` so; vLLM 0.27's asynchronous output waits on one before it reads the sampled tokens
its side stream copies to the host, and vllm-ascend #11709 made it the NPU's again): the scheduler would
read them before the copy lands.

``spec_metadata_by_request`` is no break: ``_calc_spec_decode_metadata`` written as a loop over the
requests, the same indices by another road; the gate must pass it.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch


def bonus_of_the_last_draft(original):
    def broken(self, *args, **kwargs):
        spec = original(self, *args, **kwargs)
        return dataclasses.replace(spec, bonus_logits_indices=spec.bonus_logits_indices - 1)

    return broken


def discarded_samples_booked(original):
    def broken(self, *args, **kwargs):
        discarded, self.num_discarded_requests = self.num_discarded_requests, 0
        try:
            return original(self, *args, **kwargs)
        finally:
            self.num_discarded_requests = discarded

    return broken


def books_a_token_short(original):
    def broken(self, *args, **kwargs):
        before = self.input_batch.num_tokens_no_spec.copy()
        out = original(self, *args, **kwargs)
        booked = self.input_batch.num_tokens_no_spec != before
        self.input_batch.num_tokens_no_spec[booked] -= 1
        return out

    return broken


class _EventPlaceholder:
    """An event whose record, wait and synchronize do nothing (the wrapper's own placeholder)."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    def synchronize(self, *args, **kwargs):
        pass

    def wait(self, *args, **kwargs):
        pass

    def query(self, *args, **kwargs):
        return True


def events_left_placeholders(original):
    def broken():
        left = original()
        left[("cuda", "Event")] = left[(None, "Event")] = _EventPlaceholder
        return left

    return broken


def spec_metadata_by_request(original):
    """The runner's ``SpecDecodeMetadata`` built request by request: each request's sampled rows are the
    last ``1 + k`` of its query, its drafts the ``k`` ids after the first of them."""

    def rewritten(self, num_draft_tokens, cu_num_scheduled_tokens, *args, **kwargs):
        spec = original(self, num_draft_tokens, cu_num_scheduled_tokens, *args, **kwargs)  # its type and device
        logits, target, bonus, drafts = [], [], [], []
        for k, end in zip(num_draft_tokens.tolist(), cu_num_scheduled_tokens.tolist()):
            first = len(logits)
            logits += range(end - 1 - k, end)
            target += range(first, first + k)
            bonus.append(first + k)
            drafts += self.input_ids.gpu[end - k : end].tolist()
        device = spec.logits_indices.device
        cu_drafts = np.cumsum(num_draft_tokens).tolist()
        cu_sampled = np.cumsum(np.asarray(num_draft_tokens) + 1).tolist()

        def tensor(values, like):
            return torch.tensor(values, dtype=like.dtype, device=device)

        return dataclasses.replace(
            spec,
            draft_token_ids=tensor(drafts, spec.draft_token_ids),
            num_draft_tokens=list(num_draft_tokens.tolist()),
            cu_num_draft_tokens=tensor(cu_drafts, spec.cu_num_draft_tokens),
            cu_num_sampled_tokens=tensor(cu_sampled, spec.cu_num_sampled_tokens),
            target_logits_indices=tensor(target, spec.target_logits_indices),
            bonus_logits_indices=tensor(bonus, spec.bonus_logits_indices),
            logits_indices=tensor(logits, spec.logits_indices),
        )

    return rewritten
