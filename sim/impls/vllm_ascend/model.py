"""The tiny MTP model and the recording attention group behind vllm-ascend's interfaces.

vllm-ascend's ``_propose`` builds each step's attention metadata itself: step 1
through ``draft_attn_groups[0].get_metadata_builder().build(...)``, steps 2..K
through ``attn_update_stack_num_spec_norm``, which calls
``build_for_drafting(cad, draft_index)``, every step's before the first
forward. ``AscendSnapshotAttnGroup`` is that group and its builder: it checks
the host mirrors and hands attention what ``AscendAttentionMetadataBuilder.build``
(attention_v1.py) hands the NPU kernels: the lengths from the host,
``seq_lens_list`` from ``_seq_lens_cpu`` (else ``seq_lens_cpu``) and
``actual_seq_lengths_q`` from ``query_start_loc_cpu``, taken as lists at build,
and the host bound ``max(seq_lens_list)`` (vllm-ascend sets ``max_seq_len`` to
0); so a stale mirror changes the drafts. ``AscendTinyMtp`` reads the metadata
back from the forward context and takes its KV slots from it (vllm-ascend
keeps them in the metadata, padded with -1 to the buffer's length).
"""

from __future__ import annotations

import torch

from mtp.model import AttentionMeta
from sim.impls.vllm.metadata_checks import present
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

    def attention_meta(self, cad) -> AttentionMeta:
        """What vllm-ascend's attention builder gives the kernels: host lengths, as lists taken at build."""
        n, device = cad.num_reqs, cad.seq_lens.device
        seq_lens_list = host_seq_lens(cad)[:n].tolist()
        actual_seq_lengths_q = cad.query_start_loc_cpu[1 : n + 1].tolist()
        return AttentionMeta(
            query_start_loc=torch.tensor([0, *actual_seq_lengths_q], dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens_list, dtype=torch.int32, device=device),
            block_table=cad.block_table_tensor,
            slot_mapping=cad.slot_mapping,
            seq_len_bound=torch.tensor([max(seq_lens_list, default=0)], dtype=torch.int64),
        )


def host_seq_lens(cad) -> torch.Tensor:
    """The host lengths vllm-ascend's builders read: ``_seq_lens_cpu``, else ``seq_lens_cpu``, else the device's."""
    for name in ("_seq_lens_cpu", "seq_lens_cpu"):
        value = present(cad, name)
        if value is not None:
            return value
    return cad.seq_lens.cpu()


class AscendTinyMtp(VllmTinyMtp):
    """``TinyMtp`` as vllm-ascend's draft model: KV slots come with the attention metadata (int32 there)."""

    def slots(self, context, attn) -> torch.Tensor:
        return attn.slot_mapping.to(torch.int64)
