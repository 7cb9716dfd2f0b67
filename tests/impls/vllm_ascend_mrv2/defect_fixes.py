"""vllm-ascend's MRV2 speculator with a known defect fixed, as a pull request fixing it would:
``broken_gate.FIXES``. Each wraps the speculator's own methods; the rest runs as the checkout has it.

- ``advanced_once``: ``host-seq-lens-advanced-twice``: ``_generate_draft`` raises the host lengths
  once per draft step (its ``_ascend_prepare_decode_draft``), not again after the step's forward.
- ``host_seq_lens_lowered``: ``host-seq-lens-not-lowered``: before the draft steps, the runner's host
  lengths (``seq_lens_np``, which the step updates advance; on main also ``seq_lens_cpu_upper_bound``,
  which the batch bound is taken over) are lowered by the rejected counts, as
  vLLM's kernel lowers the device ones (the host counts copied back: the sync vllm-ascend's NOTE
  avoids).
"""

from __future__ import annotations

import functools


def advanced_once(generate_draft):
    """``_generate_draft`` whose trailing ``_increment_decode_attn_metadata`` (the second of the step) does nothing."""

    @functools.wraps(generate_draft)
    def fixed(self, *args, **kwargs):
        increment, calls = self._increment_decode_attn_metadata, []

        def first_only(attn_metadata):
            calls.append(attn_metadata)
            if len(calls) == 1:
                increment(attn_metadata)

        self._increment_decode_attn_metadata = first_only
        try:
            return generate_draft(self, *args, **kwargs)
        finally:
            del self._increment_decode_attn_metadata

    return fixed


def host_seq_lens_lowered(propose):
    """``propose`` that lowers the runner's host lengths by the call's rejected counts first."""

    @functools.wraps(propose)
    def fixed(self, input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states, num_sampled,
              num_rejected, *args, **kwargs):  # fmt: skip
        n, rejected = num_rejected.shape[0], num_rejected.cpu()
        input_batch.seq_lens_np[:n] -= rejected.numpy().astype(input_batch.seq_lens_np.dtype)
        bound = getattr(input_batch, "seq_lens_cpu_upper_bound", None)  # main's: the batch bound is over it
        if bound is not None:
            bound[:n] -= rejected.to(bound.dtype)
        return propose(self, input_batch, attn_metadata, slot_mappings, last_hidden_states, aux_hidden_states,
                       num_sampled, num_rejected, *args, **kwargs)  # fmt: skip

    return fixed
