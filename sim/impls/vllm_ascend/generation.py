"""What differs between the vllm-ascend generations the adapter drives, found by signature, not by version.

The same adapter runs vllm-ascend 0.23.0 (on vLLM 0.23.0) and main (on vLLM
0.27.1); where their proposer's methods differ, this module asks the method
itself what it takes:

- ``attn_update_stack_num_spec_norm``: 0.23.0 takes ``old_attn_metadata`` before the
  common metadata (the eager path reads none of it: None); main dropped it.
- ``_propose``: main takes ``num_speculative_tokens`` (dynamic speculative decoding:
  it sets ``self.num_speculative_tokens`` from it on entry), which main's runner hands it from
  ``SchedulerOutput.num_spec_tokens_to_schedule`` (a field vLLM 0.27 has, 0.23 has not);
  0.23.0 reads the attribute.
- the runner's ``propose_draft_token_ids`` asks ``use_cp`` (0.23.0) or ``use_dcp`` (main):
  both are the runner's own properties, compiled from source (``build.RunnerView``).

What differs at import (vLLM 0.27's ``PIN_MEMORY``, main's ``triton.experimental.gluon``
stand-ins) is absorbed by ``importing.prepare``.
"""

from __future__ import annotations

import dataclasses

from sim.impls.kit.signatures import takes


def update_step(p, draft_index: int, cad, batch_size: int, positions, mode, attn_group):
    """One ``attn_update_stack_num_spec_norm`` call, eager and unpadded (``input_batch_size == batch_size``)."""
    head = (
        (draft_index, None, cad)
        if takes(p.attn_update_stack_num_spec_norm, "old_attn_metadata")
        else (draft_index, cad)
    )
    return p.attn_update_stack_num_spec_norm(*head, batch_size, batch_size, positions, mode, attn_group=attn_group)


def scheduled_draft_count(scheduler_output_cls, num_speculative_tokens: int) -> dict:
    """The ``SchedulerOutput`` field by which this generation's scheduler tells the runner the draft
    count (vLLM 0.27's ``num_spec_tokens_to_schedule``; 0.23 has none)."""
    fields = {f.name for f in dataclasses.fields(scheduler_output_cls)}
    return {"num_spec_tokens_to_schedule": num_speculative_tokens} if "num_spec_tokens_to_schedule" in fields else {}
