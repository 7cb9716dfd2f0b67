"""The tiny MTP model behind vllm-ascend 0.13.0's ``MtpProposer``, reading the Ascend MLA metadata.

0.13's ``_propose`` calls ``self.model(input_ids=, positions=, hidden_states=)`` and takes one
tensor back (not 0.23's pair); the step's attention metadata travels through the forward
context as an ``AscendMLAMetadata`` per layer. ``MlaTinyMtp`` reads it the way the MLA kernels
do (``mla_metadata.attention_view``), runs ``TinyMtp`` on the paged cache and records a
``StepRecord`` per call. A slot past the cache (``slot-plus-one`` from the cache's last slot)
is recorded as given, counted in ``slots_past_cache`` and not written: on an NPU that write
lands out of bounds, which no simulation defines. With no tiny model it is a recorder only (hidden states and logits of
zeros): what the steps' metadata is does not depend on the drafts, so the step ops run
``_propose`` with it. ``records`` keeps each call's ``AscendMLAMetadata`` parts as they were
when the model ran (``_propose`` edits them afterwards).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from mtp.trace import StepRecord
from sim.impls.kit.vllm_model import LAYER, step_record, with_padding_rows
from sim.impls.vllm_ascend_0_13.importing import import_ascend
from sim.impls.vllm_ascend_0_13.mla_metadata import attention_view

__all__ = ["LAYER", "MlaTinyMtp"]


class MlaTinyMtp(nn.Module):
    """``TinyMtp`` (or nothing, ``tiny=None``) as 0.13's draft model."""

    def __init__(self, tiny=None, hidden_size: int = 0, vocab_size: int = 1):
        super().__init__()
        self.tiny = tiny
        self.hidden_size = tiny.hidden_size if tiny is not None else hidden_size
        self.vocab_size = tiny.vocab_size if tiny is not None else vocab_size
        self.trace: list[StepRecord] | None = None
        self.sample_indices: torch.Tensor | None = None  # first pass: set by the adapter
        self.metadata: list = []  # per call: (decode, prefill) parts, copied when the model ran
        self.calls = 0
        self.slots_past_cache = 0  # KV writes 0.13 addressed past the cache (slot-plus-one from its last slot)

    def forward(self, input_ids, positions, hidden_states=None, inputs_embeds=None, **_):
        md = import_ascend("vllm.forward_context").get_forward_context().attn_metadata[LAYER]
        attn, bound = attention_view(md)
        n = input_ids.shape[0]
        # rows past query_start_loc[-1]: the first pass's rows, rerun stale (steps 2..K)
        slots = attn.slot_mapping
        meta = with_padding_rows(attn, slots[:n], n)
        if self.tiny is not None:
            outside = meta.slot_mapping >= self.tiny.cache.num_slots
            self.slots_past_cache += int(outside.sum())
            meta.slot_mapping = meta.slot_mapping.masked_fill(outside, -1)  # an NPU would write out of bounds
            out = self.tiny.forward(input_ids, positions, hidden_states.to(torch.float32), meta)
        else:
            out = torch.zeros(n, self.hidden_size, dtype=torch.float32, device=input_ids.device)
        self.calls += 1
        self.metadata.append((copy.deepcopy(md.decode), copy.deepcopy(md.prefill)))
        if self.trace is not None:
            self.trace.append(step_record(self.calls, bound, attn, input_ids, positions, slots, n, self.sample_indices))
        return out

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.tiny is not None:
            return self.tiny.compute_logits(hidden_states)
        return torch.zeros(hidden_states.shape[0], self.vocab_size, dtype=torch.float32, device=hidden_states.device)
