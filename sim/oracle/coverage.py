"""Which weak spots one propose call exercised, read off its plain-list case."""

from __future__ import annotations

from sim.oracle import reference
from sim.oracle.cases import BatchCase

FEATURES = (
    "draft crosses a block boundary",
    "draft overflows max_model_len",
    "all drafts rejected",
    "all drafts accepted",
    "partial prefill beside a decode",
)


def features(case: BatchCase) -> set[str]:
    cfg = case.config
    crosses, overflows, all_rejected, all_accepted, mixed = FEATURES
    found = set()
    for req in case.requests:
        _, valid = reference.next_token(req, cfg.vocab_size)
        accepted = req.seq_len - reference.rejected(req, valid)
        for j in range(2, cfg.num_spec_tokens + 1):
            pos = accepted - 2 + j
            if pos >= cfg.max_model_len:
                found.add(overflows)
            elif pos % cfg.block_size == 0:
                found.add(crosses)
        if req.num_drafts and valid == req.num_drafts + 1:
            found.add(all_accepted)
        if req.num_drafts and valid == 1:
            found.add(all_rejected)
    if any(r.discarded for r in case.requests) and any(r.num_drafts for r in case.requests):
        found.add(mixed)
    return found
