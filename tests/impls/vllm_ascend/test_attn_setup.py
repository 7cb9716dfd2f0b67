"""The draft's attention is set up by the drafter's own ``initialize_attn_backend`` (``attn_setup``).

Its block size, KV-cache group and attention group (with the group's ``kv_cache_spec``) are what
that method decides from vLLM's ``KVCacheConfig``, not values the adapter sets; a drafter that takes
its block size from another group than the draft layers' fails a serving run (the per-step slots).
"""

from __future__ import annotations

import pytest

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.vllm_model import LAYER
from sim.impls.vllm_ascend import attn_setup, builders
from sim.impls.vllm_ascend.build import configured
from tests.impls.suites import assert_serving_runs_fail
from tests.impls.vllm_ascend import broken_gate


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_the_drafters_setup_decides_block_size_and_group(block_size):
    p = configured(2, block_size, 64, 8)
    config = attn_setup.kv_cache_config(block_size, 8)
    (gid,) = [g for g, group in enumerate(config.kv_cache_groups) if LAYER in group.layer_names]
    (group,) = p.draft_attn_groups
    assert isinstance(group, import_ascend("vllm.v1.worker.utils").AttentionGroup)
    assert (p.kv_cache_gid, group.kv_cache_group_id, group.layer_names) == (gid, gid, [LAYER])
    assert group.kv_cache_spec == config.kv_cache_groups[gid].kv_cache_spec
    builder = group.get_metadata_builder()
    assert type(builder) is builders.attention_builder()
    assert isinstance(builder, import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionMetadataBuilder)
    assert p.block_size == builder.kv_cache_spec.block_size == block_size
    assert config.kv_cache_groups[0].kv_cache_spec.block_size != block_size  # another group's differs


def test_a_block_size_from_the_wrong_group_fails_the_gate(monkeypatch, device, impl):
    """Steps 2..K's slots computed with the target group's block size: other slots than the
    reference's, or (small caches) a slot past the paged cache, where the KV write fails."""
    broken_gate.apply("draft-block-size-from-the-first-group", monkeypatch)
    match = r"slot|out of bounds"
    assert_serving_runs_fail(impl, device, "broken-block-size-group", match, errors=(AssertionError, IndexError))
