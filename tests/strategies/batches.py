"""Valid verified batches: prefills, partial prefills and decodes, mixed.

Hypothesis draws the structure (sizes, kinds, acceptance), so it shrinks to
small readable cases; bulk values (token ids, block ids) come from a numpy
generator seeded by a drawn integer, which keeps large batches cheap.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mtp.config import ProposerConfig
from sim.oracle.cases import BatchCase, RequestCase

KINDS = ("decode", "prefill", "partial")
BLOCK_SIZES = (1, 2, 3, 4, 8, 16, 32, 64, 128)


def _blocks_needed(seq_len: int, k: int, block_size: int, max_model_len: int) -> int:
    return min(seq_len + k - 2, max_model_len - 1) // block_size + 1


@st.composite
def requests(draw, k: int, max_model_len: int, vocab_size: int, max_query: int = 48):
    """(kind, query_len, num_computed, num_drafts, accepted, near_end) of one request."""
    kind = draw(st.sampled_from(KINDS))
    near_end = draw(st.booleans())
    if kind == "decode":
        drafts = draw(st.integers(1, k))
        qlen = drafts + 1
        accepted = draw(st.integers(0, drafts))
    else:
        drafts, accepted = 0, 0
        qlen = draw(st.integers(1, min(max_query, max_model_len)))
    room = max_model_len - qlen
    if near_end:
        computed = draw(st.integers(max(0, room - k - 1), room))
    else:
        computed = draw(st.integers(0, room)) if kind != "prefill" else draw(st.sampled_from([0, room // 2]))
    return kind, qlen, computed, drafts, accepted


@st.composite
def batch_cases(
    draw, max_reqs: int = 64, max_k: int = 5, max_model_len_range: tuple[int, int] = (8, 1024), method: str = "mtp"
):
    """A ``BatchCase`` whose every request is valid for its config (of drafting ``method``)."""
    if not 1 <= max_reqs or not 1 <= max_k:
        raise ValueError(f"max_reqs={max_reqs!r}, max_k={max_k!r}: both must be >= 1")
    lo, hi = max_model_len_range
    if not 2 <= lo <= hi:
        raise ValueError(f"max_model_len_range={max_model_len_range!r}: needs 2 <= lo <= hi")
    k = draw(st.integers(1, max_k))
    block_size = draw(st.sampled_from(BLOCK_SIZES) | st.integers(1, 128))
    max_model_len = draw(st.integers(lo, hi))
    vocab = draw(st.integers(2, 4096))
    shapes = draw(st.lists(requests(k, max_model_len, vocab), min_size=1, max_size=max_reqs))
    seed = draw(st.integers(0, 2**32 - 1))
    rows = sum(q for _, q, _, _, _ in shapes) + (len(shapes) if method == "draft_model" else 0)
    cfg = ProposerConfig(
        num_spec_tokens=k,
        vocab_size=vocab,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_tokens=rows + draw(st.integers(0, 16)),
        max_num_reqs=max_reqs,
        hidden_size=8,
        method=method,
    )
    return build_case(cfg, shapes, seed)


def build_case(cfg: ProposerConfig, shapes: list[tuple], seed: int) -> BatchCase:
    """The ``BatchCase`` of request ``shapes`` (drawn by ``requests``), bulk values from ``seed``.

    Shared by ``batch_cases`` and the call sequences (tests/strategies/sequences.py),
    so a call in a sequence is a batch the single-call properties could draw.
    """
    k, block_size, max_model_len, vocab = cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.vocab_size
    rng = np.random.default_rng(seed)
    reach = k + cfg.extra_rows_per_request  # a draft model's steps go one position further
    need = [_blocks_needed(c + q, reach, block_size, max_model_len) for _, q, c, _, _ in shapes]
    pool = rng.permutation(sum(need) * 2).tolist()  # non-contiguous, never shared
    reqs = []
    for (kind, qlen, computed, drafts, accepted), n in zip(shapes, need):
        blocks, pool = pool[:n], pool[n:]
        valid = accepted + 1 if kind == "decode" else 1
        sampled = rng.integers(0, vocab, size=valid).tolist()
        placeholders = np.where(rng.random(k + 1 - valid) < 0.8, -1, vocab + rng.integers(0, 7, size=k + 1 - valid))
        reqs.append(
            RequestCase(
                tokens=rng.integers(0, vocab, size=qlen + 1).tolist(),
                num_computed=computed,
                query_len=qlen,
                num_drafts=drafts,
                sampled=sampled + placeholders.tolist(),
                discarded=kind == "partial",
                blocks=blocks,
            )
        )
    return BatchCase(config=cfg, requests=reqs, seed=seed)


# A fixed batch the single-call properties run first, as an explicit example (never shrunk, so a
# regression it shows fails at once): 13 requests of every kind (decodes with all, some and none of
# their drafts accepted, prefills, partial prefills, one reaching max_model_len), spanning several
# blocks and more than three of the spec-decode kernels' 4-request program tiles, so their
# grid-stride loops lap (sim/impls/kit/kernel_grid.py).
WIDE_SHAPES = [
    ("decode", 4, 10, 3, 3),
    ("decode", 4, 20, 3, 0),
    ("decode", 3, 5, 2, 1),
    ("prefill", 7, 0, 0, 0),
    ("partial", 5, 8, 0, 0),
    ("decode", 4, 58, 3, 2),
    ("decode", 2, 30, 1, 0),
    ("prefill", 1, 0, 0, 0),
    ("decode", 4, 12, 3, 1),
    ("partial", 9, 16, 0, 0),
    ("decode", 4, 44, 3, 3),
    ("decode", 4, 3, 3, 2),
    ("prefill", 12, 0, 0, 0),
]
WIDE = build_case(
    ProposerConfig(
        num_spec_tokens=3,
        vocab_size=97,
        block_size=4,
        max_model_len=64,
        max_num_tokens=sum(q for _, q, _, _, _ in WIDE_SHAPES) + 3,
        max_num_reqs=16,
        hidden_size=8,
    ),
    WIDE_SHAPES,
    seed=20261201,
)
