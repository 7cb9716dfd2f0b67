"""Several propose calls in a row on one proposer.

One config and one graph mode per sequence (a proposer's buffers and graphs
are fixed at construction); per call, a batch of its own size, block-table
width and sampled-token mode (padded or unpadded). The calls are unrelated
batches on purpose: each must come out as if it were the proposer's first, so
anything one call leaves in a persistent buffer that reaches the next shows.
"""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import strategies as st

from mtp.config import ProposerConfig
from sim.oracle.cases import BatchCase
from sim.serving.scenario import GRAPH_MODES
from tests.strategies.batches import BLOCK_SIZES, build_case, requests


class Call(NamedTuple):
    case: BatchCase
    padded: bool


class CallSequence(NamedTuple):
    config: ProposerConfig
    mode: str  # eager, piecewise, full
    capture_sizes: list[int]  # one or two, so a fresh proposer captures quickly; larger batches run eagerly
    calls: list[Call]
    model_seed: int


@st.composite
def call_sequences(
    draw,
    max_calls: int = 3,
    max_reqs: int = 8,
    max_model_len_range: tuple[int, int] = (8, 160),
    modes: tuple[str, ...] = GRAPH_MODES,
):
    """A ``CallSequence`` of 2..``max_calls`` batches for one proposer, in one of ``modes``."""
    if max_calls < 2 or max_reqs < 1:
        raise ValueError(f"max_calls={max_calls!r}, max_reqs={max_reqs!r}: need max_calls >= 2, max_reqs >= 1")
    if not modes or set(modes) - set(GRAPH_MODES):
        raise ValueError(f"modes={modes!r}: one or more of {GRAPH_MODES}")
    lo, hi = max_model_len_range
    if not 2 <= lo <= hi:
        raise ValueError(f"max_model_len_range={max_model_len_range!r}: needs 2 <= lo <= hi")
    k = draw(st.integers(1, 4))
    block_size = draw(st.sampled_from(BLOCK_SIZES[:6]) | st.integers(1, 32))
    max_model_len = draw(st.integers(lo, hi))
    vocab = draw(st.integers(2, 512))
    n_calls = draw(st.integers(2, max_calls))
    shapes = [
        draw(st.lists(requests(k, max_model_len, vocab, max_query=16), min_size=1, max_size=max_reqs))
        for _ in range(n_calls)
    ]
    seeds = [draw(st.integers(0, 2**32 - 1)) for _ in range(n_calls)]
    padded = [draw(st.booleans()) for _ in range(n_calls)]
    most = max(sum(q for _, q, _, _, _ in s) for s in shapes)
    cfg = ProposerConfig(
        num_spec_tokens=k,
        vocab_size=vocab,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_tokens=most + draw(st.integers(0, 8)),
        max_num_reqs=max_reqs,
        hidden_size=8,
    )
    calls = [Call(build_case(cfg, s, seed), p) for s, seed, p in zip(shapes, seeds, padded)]
    mode = draw(st.sampled_from(modes))
    # One size both phases can hold (steps pad requests, up to max_reqs), more for the first pass.
    small = draw(st.integers(1, min(max_reqs, cfg.max_num_tokens)))
    sizes = draw(st.lists(st.integers(1, cfg.max_num_tokens), max_size=1))
    return CallSequence(cfg, mode, sorted({small, *sizes}), calls, draw(st.integers(0, 2**16)))
