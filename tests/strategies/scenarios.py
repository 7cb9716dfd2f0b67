"""Serving scenarios steered at the proposer's weak spots.

Small blocks (drafts cross block boundaries in steps >= 2), a small
max_model_len (drafts overflow it), every acceptance policy (reject
everything, accept everything, random, real greedy verification) and a tight
token budget (partial prefills beside decodes).
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from sim.serving.scenario import ACCEPT_POLICIES, RequestSpec, Scenario

# How the drawn scenarios verify drafts: every policy but ``reference``, which measures what a
# divergence costs (``python -m sim explain``) and needs the reference inside the serving loop.
VERIFIERS = tuple(a for a in ACCEPT_POLICIES if a != "reference")


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
    budget = draw(st.integers(k + 1, 40))
    num_reqs = draw(st.integers(1, min(max_reqs, budget)))  # vLLM: max_num_batched_tokens >= max_num_seqs
    return Scenario(
        seed=draw(st.integers(0, 2**16)),
        num_spec_tokens=k,
        block_size=draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16])),
        max_model_len=mml,
        token_budget=budget,
        max_num_reqs=num_reqs,
        capture_sizes=draw(capture_sizes(budget, num_reqs)),
        padded=draw(st.booleans()) if padded is None else padded,
        accept=draw(st.sampled_from(VERIFIERS)),
        vocab_size=draw(st.sampled_from([32, 96])),
        hidden_size=32,
        max_iterations=max_iterations,
        requests=tuple(reqs),
    )


@st.composite
def scheduled_by_vllm(draw, asynchronous: bool = False):
    """A drawn scenario whose steps vLLM's scheduler decides (its ``AsyncScheduler`` if ``asynchronous``:
    padded then, as vLLM requires), on a KV cache of one request at full length up to enough for every
    request (the fewer blocks, the more it preempts), with or without its prefix caching, the prompts
    sharing a drawn prefix, on a decode node (every prompt's KV loaded through its KV connector) or not."""
    scenario = draw(scenarios(padded=True if asynchronous else None))
    least, most = scenario.kv_blocks_bounds
    # A decode node's cache holds every request: on fewer blocks vLLM can hold them all for prompts it loaded
    # and waits on (it preempts running requests only), and no step runs again (DECODE_NODE preempts on 13)
    decode_node = draw(st.booleans())
    return dataclasses.replace(
        scenario,
        scheduler="vllm",
        kv_blocks=0 if decode_node else draw(st.integers(least, most)),
        async_scheduling=asynchronous,
        prefix_caching=not decode_node and draw(st.booleans()),  # a decode node's hits beside its loads: not modelled
        shared_prefix=draw(st.integers(0, scenario.max_model_len)),
        decode_node=decode_node,
    )


def capture_sizes(max_num_tokens: int, max_num_reqs: int) -> st.SearchStrategy[tuple[int, ...] | None]:
    """None (vLLM's default list, up to eight sizes here) or one to three sizes in any order, one of
    them small enough for the steps: fewer graphs to capture, more padding, more batches past the
    largest graph (run eagerly)."""
    step = st.integers(1, min(max_num_reqs, max_num_tokens))
    more = st.lists(st.integers(1, max_num_tokens), max_size=2)
    drawn = st.tuples(step, more).map(lambda t: tuple(dict.fromkeys([t[0], *t[1]])))
    return st.none() | drawn


def kernel_block_sizes(block_size: int):
    """The kernel blocks a hybrid target's ``block_size``-token blocks may split into: each divisor below it."""
    return st.sampled_from([d for d in range(1, block_size) if block_size % d == 0])
