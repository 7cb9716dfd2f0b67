"""One attribute of a module or object replaced for a block: plumbing the adapters put in the place of what a
device or a worker process would have set (vLLM's UVA buffers, a constructor's ``torch.cuda`` wrapper), and what
the broken variants of the tests put in place of the code under test."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def in_place_of(owner, name: str, value):
    """``owner.name`` is ``value`` inside the block, its own again after."""
    own = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield value
    finally:
        setattr(owner, name, own)
