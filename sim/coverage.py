"""Which weak spots one propose call exercised, read off its plain-list case."""

from __future__ import annotations

from sim import reference
from sim.cases import BatchCase

FEATURES = (
    "draft crosses a block boundary",
    "draft overflows max_model_len",
    "all drafts rejected",
    "all drafts accepted",
    "partial prefill beside a decode",
)


def features(case: BatchCase) -> set[str]:
    cfg = case.config
    found = set()
    for req in case.requests:
        _, valid = reference.next_token(req, cfg.vocab_size)
        accepted = req.seq_len - reference.rejected(req, valid)
        for j in range(2, cfg.num_spec_tokens + 1):
            pos = accepted - 2 + j
            if pos >= cfg.max_model_len:
                found.add("draft overflows max_model_len")
            elif pos % cfg.block_size == 0:
                found.add("draft crosses a block boundary")
        if req.num_drafts:
            found.add("all drafts accepted" if valid == req.num_drafts + 1 else "")
            found.add("all drafts rejected" if valid == 1 else "")
    if any(r.discarded for r in case.requests) and any(r.num_drafts for r in case.requests):
        found.add("partial prefill beside a decode")
    found.discard("")
    return found
