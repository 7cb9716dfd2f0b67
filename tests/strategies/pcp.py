"""Batches as PCP sees them: query lengths, which requests are split, P."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import strategies as st


class PcpCase(NamedTuple):
    query_lens: list[int]
    split: list[bool]
    size: int


@st.composite
def pcp_cases(draw, max_reqs: int = 16, sizes=(1, 2, 3, 4, 8)):
    if max_reqs < 1:
        raise ValueError(f"max_reqs={max_reqs!r}: must be >= 1")
    reqs = draw(st.lists(st.tuples(st.integers(1, 80), st.booleans()), min_size=1, max_size=max_reqs))
    return PcpCase([q for q, _ in reqs], [s for _, s in reqs], draw(st.sampled_from(sizes)))
