"""Verification batches for a rejection sampler: requests with 0 to ``max_spec_len`` drafts, greedy or
random, whose target agrees with each draft or not as drawn.

Hypothesis draws the structure (the batch size, each request's drafts and whether the target's
argmax agrees with each, its temperature), so a failure shrinks to a few requests; the logits come
from a torch generator seeded by a drawn integer. Where the target agrees, the draft's logit is
raised above every other; where it does not, lowered below: no ties, so the greedy output is
defined. Batches of more than ``VECTOR_CORES`` requests make vllm-ascend's kernels walk several
requests per program.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from sim.oracle.rejection import Verification

VOCAB = 8
VECTOR_CORES = 8  # sim.impls.kit.ascend.importing.VECTOR_CORES: a larger batch puts several requests in a program


@st.composite
def verifications(draw, greedy: bool | None = True, max_reqs: int = 2 * VECTOR_CORES + 3, max_spec_len: int = 5):
    """``greedy``: every request greedy (True), every one random (False), or each drawn (None)."""
    k = draw(st.integers(1, max_spec_len))
    n = draw(st.integers(1, max_reqs))
    counts = draw(st.lists(st.integers(0, k), min_size=n, max_size=n))
    counts[draw(st.integers(0, n - 1))] = k  # the batch's widest request has k drafts
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    drafts = tuple(tuple(torch.randint(0, VOCAB, (c,), generator=gen).tolist()) for c in counts)
    flat = [t for d in drafts for t in d]
    agree = draw(st.lists(st.booleans(), min_size=len(flat), max_size=len(flat)))
    logits = torch.randn(len(flat), VOCAB, generator=gen)
    for row, (token, yes) in enumerate(zip(flat, agree)):
        logits[row, token] = logits[row].max() + 1 if yes else logits[row].min() - 1
    if greedy is None:
        temperature = tuple(draw(st.sampled_from([0.0, 1.0])) for _ in range(n))
    else:
        temperature = (0.0 if greedy else 1.0,) * n
    bonus = tuple(torch.randint(0, VOCAB, (n,), generator=gen).tolist())
    return Verification(drafts, logits, bonus, temperature, k)
