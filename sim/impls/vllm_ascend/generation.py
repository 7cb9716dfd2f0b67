"""What differs between the vllm-ascend generations the adapter drives, found by signature, not by version.

The same adapter runs vllm-ascend 0.23.0 (on vLLM 0.23.0) and main (on vLLM
0.27.1); where their proposer's methods differ, this module asks the method
itself what it takes:

- ``attn_update_stack_num_spec_norm``: 0.23.0 takes ``old_attn_metadata`` before the
  common metadata (the eager path reads none of it: None); main dropped it.
- ``_propose``: main takes ``num_speculative_tokens`` (dynamic speculative decoding:
  it sets ``self.num_speculative_tokens`` from it on entry); 0.23.0 reads the attribute.

What differs at import (vLLM 0.27's ``PIN_MEMORY``, main's ``triton.experimental.gluon``
stand-ins) is absorbed by ``importing.prepare``.
"""

from __future__ import annotations

import inspect


def takes(method, name: str) -> bool:
    """Whether ``method`` (or the method it wraps) has a parameter called ``name``."""
    return name in inspect.signature(method).parameters


def update_step(p, draft_index: int, cad, batch_size: int, positions, mode, attn_group):
    """One ``attn_update_stack_num_spec_norm`` call, eager and unpadded (``input_batch_size == batch_size``)."""
    head = (
        (draft_index, None, cad)
        if takes(p.attn_update_stack_num_spec_norm, "old_attn_metadata")
        else (draft_index, cad)
    )
    return p.attn_update_stack_num_spec_norm(*head, batch_size, batch_size, positions, mode, attn_group=attn_group)


def propose_args(p, num_speculative_tokens: int) -> dict:
    """The keyword arguments by which this generation's ``_propose`` learns the draft count."""
    return {"num_speculative_tokens": num_speculative_tokens} if takes(p._propose, "num_speculative_tokens") else {}
