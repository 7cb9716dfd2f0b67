"""The tiny MTP model and the recording attention group behind vllm-ascend's interfaces.

vllm-ascend's ``_propose`` builds each step's attention metadata itself: step 1
through ``draft_attn_groups[0].get_metadata_builder().build(...)``, steps 2..K
through ``attn_update_stack_num_spec_norm``, which calls
``build_for_drafting(cad, draft_index)``. ``AscendSnapshotAttnGroup`` is that
group and its builder: it snapshots what each step's attention would see,
with the host bound NPU attention reads (``max(seq_lens_cpu)``; vllm-ascend
sets ``max_seq_len`` to 0). ``AscendTinyMtp`` reads the metadata back from the
forward context and takes its KV slots from it (vllm-ascend keeps them in the
metadata, padded with -1 to the buffer's length).
"""

from __future__ import annotations

import torch

from sim.impls.vllm.model import LAYER, SnapshotAttnGroup, VllmTinyMtp

__all__ = ["LAYER", "AscendSnapshotAttnGroup", "AscendTinyMtp"]


class AscendSnapshotAttnGroup(SnapshotAttnGroup):
    """Duck-types vllm-ascend's attention group and metadata builder."""

    backend = None

    def get_metadata_builder(self):
        return self

    def build(self, common_prefix_len, common_attn_metadata, model=None, **_):
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=0)

    def build_for_drafting(self, common_attn_metadata, draft_index, **_):
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=draft_index)

    def seq_len_bound(self, cad) -> int:
        host = cad.seq_lens_cpu if cad.seq_lens_cpu is not None else cad.seq_lens
        return int(host[: cad.num_reqs].max())


class AscendTinyMtp(VllmTinyMtp):
    """``TinyMtp`` as vllm-ascend's draft model: KV slots come with the attention metadata (int32 there)."""

    def slots(self, context, attn) -> torch.Tensor:
        return attn.slot_mapping.to(torch.int64)
