"""Serving scenarios steered at the proposer's weak spots.

Small blocks (drafts cross block boundaries in steps >= 2), a small
max_model_len (drafts overflow it), every acceptance policy (reject
everything, accept everything, random, real greedy verification) and a tight
token budget (partial prefills beside decodes).
"""

from __future__ import annotations

from hypothesis import strategies as st

from sim.serving.scenario import ACCEPT_POLICIES, RequestSpec, Scenario


@st.composite
def scenarios(draw, padded: bool | None = None, max_k: int = 4, max_reqs: int = 6, max_iterations: int = 24):
    """A ``Scenario`` small enough to run in well under a second."""
    if max_k < 1 or max_reqs < 1 or max_iterations < 1:
        raise ValueError(f"max_k={max_k!r}, max_reqs={max_reqs!r}, max_iterations={max_iterations!r}: all must be >= 1")
    k = draw(st.integers(1, max_k))
    mml = draw(st.integers(12, 72))
    reqs = draw(
        st.lists(
            st.builds(
                RequestSpec,
                arrival=st.integers(0, 4),
                prompt_len=st.integers(1, mml - 1),
                max_new_tokens=st.integers(1, mml),
            ),
            min_size=1,
            max_size=max_reqs,
        )
    )
    return Scenario(
        seed=draw(st.integers(0, 2**16)),
        num_spec_tokens=k,
        block_size=draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16])),
        max_model_len=mml,
        token_budget=draw(st.integers(k + 1, 40)),
        max_num_reqs=draw(st.integers(1, max_reqs)),
        padded=draw(st.booleans()) if padded is None else padded,
        accept=draw(st.sampled_from(ACCEPT_POLICIES)),
        vocab_size=draw(st.sampled_from([32, 96])),
        hidden_size=32,
        max_iterations=max_iterations,
        requests=tuple(reqs),
    )
