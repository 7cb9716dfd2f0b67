"""The attention group that records what MRV2's draft steps hand attention, and the KV-cache view.

MRV2 builds each draft step's attention metadata with ``build_attn_metadata``, which asks every
attention group for its builder and calls ``build_metadata(common_attn_metadata, ubatch_idx)``.
``RecordingAttnGroup`` answers with the core's ``AttentionMeta``, built from vLLM's
``CommonAttentionMetadata`` by ``sim.impls.kit.vllm_model.SnapshotAttnGroup``: views of its tensors,
checked at the step's forward to be unchanged since the build (MRV2 writes its ``seq_lens``
buffer in place between steps, after each step's forward). The builder is not told the step
(``draft_index`` None), so a failure at build names none. The draft model that reads it back from the forward
context and records each call is V1's ``VllmTinyMtp``: MRV2 calls it the same way.
"""

from __future__ import annotations

from types import SimpleNamespace

from mtp.model import AttentionMeta
from sim.impls.kit.vllm_model import LAYER, SnapshotAttnGroup

# The one KV-cache group of the draft layer (``build_slot_mappings_by_layer`` and ``build_attn_metadata``
# read its layer names and count).
KV_CACHE_CONFIG = SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=[LAYER])])


class RecordingAttnGroup(SnapshotAttnGroup):
    """Duck-types vLLM's ``AttentionGroup`` for ``build_attn_metadata``: a builder with nothing to
    reuse, no KV-cache spec of its own, and ``build_metadata`` returning the snapshot."""

    kv_cache_spec = None
    kv_cache_group_id = 0
    supports_draft_decode_metadata_update = False

    def get_metadata_builder(self, ubatch_idx: int = 0):
        return SimpleNamespace(supports_update_block_table=False)

    def build_metadata(self, common_attn_metadata, ubatch_idx: int = 0, **_) -> AttentionMeta:
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=None)
