"""A draft whose layers form two attention groups: vllm-ascend's draft-step loop over ``draft_attn_groups``.

A DeepSeek V3.2 or GLM MTP layer brings its attention and its sparse indexer's key cache: two draft
layers of two backends in one KV-cache group, which the drafter's own ``initialize_attn_backend``
makes two attention groups (``attn_setup``). Each layer attends with its own group's metadata over
a cache of its own, the tiny draft's heads split between them (``AscendTinyMtp``), so a layer
handed another step's lengths or slots drafts other tokens, and its metadata is compared with the
first layer's when the forward reads it (``check_same_step``). The gate's properties of two
groups are in tests/properties/test_propose_loop.py; here the setup, and the known defect pinned.
"""

from __future__ import annotations

import dataclasses

from sim.impls.divergence import spec_for
from sim.impls.kit.ascend.draft_layers import DRAFT_LAYERS
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import attn_setup, builders
from sim.impls.vllm_ascend.build import configured
from sim.impls.vllm_ascend.divergences import DIVERGENCES, RULES
from sim.impls.vllm_ascend.model import INDEXER_LAYER, LAYER
from sim.serving.run import run_scenario
from tests.impls.fixes import skip_unless_present
from tests.properties.test_propose_loop import TYPICAL

ADVANCED = DIVERGENCES["draft-state-advanced-per-group"]
GROUPS = dataclasses.replace(TYPICAL, **ADVANCED.setting)


def test_the_drafters_setup_forms_two_attention_groups_in_one_kv_cache_group():
    p = configured(2, 4, 64, 8, DRAFT_LAYERS[2])
    groups = p.draft_attn_groups
    attention_group = import_ascend("vllm.v1.worker.utils").AttentionGroup
    assert len(groups) == 2 and all(isinstance(g, attention_group) for g in groups)
    assert sorted(name for g in groups for name in g.layer_names) == [LAYER, INDEXER_LAYER]
    assert {g.kv_cache_group_id for g in groups} == {p.kv_cache_gid}
    assert {g.backend for g in groups} == set(attn_setup.BACKENDS.values())
    assert all(type(g.get_metadata_builder()) is builders.attention_builder() for g in groups)  # the checkout's
    assert p.block_size == 4


def test_two_groups_advance_the_state_twice_per_step(impl, device):
    """Under the defect modelled, the run matches, having followed it; under the spec, step 2 attends
    with one key more per request than it may see (``seq_lens`` advanced once per group). Skipped,
    saying so, on a vllm-ascend that fixed it."""
    modelled = run_scenario(GROUPS, device, impl)
    assert modelled.ok, [str(m) for m in modelled.mismatches[:4]]
    skip_unless_present(ADVANCED.id, modelled)
    spec = run_scenario(GROUPS, device, impl, rules=spec_for(RULES, ADVANCED))
    assert not spec.ok
    assert "step 2 seq_lens" in str(spec.mismatches[0]), spec.mismatches[0]


def test_one_group_is_not_affected(impl, device):
    """With one draft group the defect decides nothing: the spec holds."""
    report = run_scenario(TYPICAL, device, impl, rules=spec_for(RULES, ADVANCED))
    assert report.ok, [str(m) for m in report.mismatches[:4]]
