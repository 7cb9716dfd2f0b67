"""Broken hand-offs from vllm-ascend's runner to its drafter, as a regression in the runner would
bring them: each takes the original method and returns the broken one.

``positions_off_by_one`` breaks ``_get_positions`` (vLLM's ``GPUModelRunner``'s, which
``NPUModelRunner`` inherits and ``propose_draft_token_ids`` gathers the target's positions with);
``num_scheduled_tokens_short`` is a runner whose ``execute_model`` hands
``propose_draft_token_ids`` one scheduled token too few (what it slices the target's rows by when
no request verified drafts).
"""

from __future__ import annotations


def positions_off_by_one(original):
    def broken(self, num_tokens):
        return original(self, num_tokens) + 1

    return broken


def num_scheduled_tokens_short(original):
    def broken(self, *args, num_scheduled_tokens, **kwargs):
        return original(self, *args, num_scheduled_tokens=num_scheduled_tokens - 1, **kwargs)

    return broken
