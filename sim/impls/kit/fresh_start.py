"""Every run of an adapter starts from a freshly built upstream proposer's state.

An adapter shares one upstream proposer between runs (building one costs
seconds); ``remember_fresh`` records its tensors as built and ``start_fresh``
puts them back, so each run starts from a new proposer's state. A buffer row
the upstream code reads before it writes it (``stale-last-row``) would
otherwise hold an earlier run's token id, which may lie past this run's
vocabulary (``IndexError`` in the tiny model). The adapters' suites pin it with a
run that reads such a row (``tests/impls/suites.py``).
"""

from __future__ import annotations

import torch

_FRESH = "_mtp_harness_fresh_state"


def _tensors(proposer):
    """(name, tensor) for every tensor the proposer holds itself, in a list (vllm-ascend's per-step
    buffers, ``slot_mapping_group``: v0.22.1rc's dummy run reads them as the last run left them) or in a
    host/device buffer pair (vLLM's ``CpuGpuBuffer``: ``.cpu`` and ``.gpu``)."""
    for name, value in vars(proposer).items():
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(value, list | tuple) and value and all(isinstance(t, torch.Tensor) for t in value):
            yield from ((f"{name}[{i}]", t) for i, t in enumerate(value))
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
