"""Every run of an adapter starts from a freshly built upstream proposer's state.

An adapter shares one upstream proposer between runs (building one costs
seconds); ``remember_fresh`` records its tensors as built and ``start_fresh``
puts them back, so each run starts from a new proposer's state. A buffer row
the upstream code reads before it writes it (``stale-last-row``) would
otherwise hold an earlier run's token id, which may lie past this run's
vocabulary (``IndexError`` in the tiny model). ``STALE_ROW_RUN`` is a serving
run that reads such a row; ``after_a_larger_vocabulary`` leaves the shared
proposer as a run with 96 ids may, for the tests that pin the fix.
"""

from __future__ import annotations

import torch

from sim.serving.scenario import RequestSpec, Scenario

_FRESH = "_mtp_harness_fresh_state"


def _tensors(proposer):
    """(name, tensor) for every tensor the proposer holds itself or in a host/device buffer pair
    (vLLM's ``CpuGpuBuffer``: ``.cpu`` and ``.gpu``)."""
    for name, value in vars(proposer).items():
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(getattr(value, "cpu", None), torch.Tensor) and isinstance(
            getattr(value, "gpu", None), torch.Tensor
        ):
            yield f"{name}.cpu", value.cpu
            yield f"{name}.gpu", value.gpu


def remember_fresh(proposer):
    """Record copies of ``proposer``'s tensors as built, for ``start_fresh``; returns the proposer."""
    vars(proposer)[_FRESH] = {name: t.detach().clone() for name, t in _tensors(proposer)}
    return proposer


def start_fresh(proposer) -> None:
    """Put back, in place, every tensor ``proposer`` held when ``remember_fresh`` saw it built
    (in place: views and aliases of the buffers stay valid)."""
    fresh = vars(proposer)[_FRESH]
    for name, t in _tensors(proposer):
        if name in fresh and t.shape == fresh[name].shape:
            t.copy_(fresh[name])


# One request, one draft, padded, vocabulary 32: its batches end on a rejected token's row.
STALE_ROW_RUN = Scenario(
    seed=10,
    num_spec_tokens=1,
    block_size=1,
    max_model_len=32,
    token_budget=2,
    max_num_reqs=1,
    padded=True,
    accept="greedy",
    vocab_size=32,
    max_iterations=24,
    requests=(RequestSpec(0, 1, 2),),
)


def after_a_larger_vocabulary(proposer) -> None:
    """Leave ``proposer``'s input ids past ``STALE_ROW_RUN``'s vocabulary, as a run with 96 ids may."""
    proposer.input_ids.fill_(90)
