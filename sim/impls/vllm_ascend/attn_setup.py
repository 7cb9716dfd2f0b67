"""The draft's attention set up as vllm-ascend's runner sets it up: ``initialize_attn_backend``.

vllm-ascend's runner (``initialize_kv_cache``) hands its drafter the KV-cache config and a kernel
block size, and the drafter's ``initialize_attn_backend`` (vLLM's ``SpecDecodeBaseProposer``'s)
finds the KV-cache group that holds the draft's attention layers, builds their
``AttentionGroup`` with the backend's metadata builder (``kv_cache_spec`` with it), and decides
``kv_cache_gid`` and ``block_size``, which the per-step slot mapping is computed with. Here it runs
on a config built with vLLM's own ``KVCacheConfig`` / ``KVCacheGroupSpec`` / ``FullAttentionSpec``:
the target's layer in group 0 and the tiny draft's layer (``LAYER``) in a group of its own, at
the call's block size, after it (the layout of a hybrid target whose groups differ in block size,
so that a value taken from another group than the draft's shows). The kernel block sizes are the
runner's: per group, vLLM's ``select_common_block_size`` over the group's backends; the drafter
is handed the first group's, as ``initialize_kv_cache`` hands it ``kernel_block_sizes[0]``.

A draft of two layers (``INDEXER_LAYER`` beside ``LAYER``, as a DeepSeek V3.2 / GLM MTP layer's
attention and its indexer's key cache) puts both in the draft's group with two backends (the tiny
attention's and ``TinyIndexerBackend``), so that ``initialize_attn_backend`` forms two draft
attention groups in one KV-cache group (vLLM's ``validate_same_kv_cache_group`` refuses a draft
across two KV-cache groups, in vLLM 0.23 and 0.27 alike).

The draft's layers are registered in the static forward context, as a model's attention layers
register themselves when built; ``initialize_attn_backend`` looks their backends up there.
``load_model``, which decides the draft's layer names and ``kernel_block_size``, is not run: it
loads the draft through vLLM's model loader (``_get_model``: ``get_model(vllm_config=...,
model_config=speculative_config.draft_model_config)``), which would build vllm-ascend's
DeepSeek MTP layer, not the simulator's tiny model; the layer names are the adapter's
(``AscendProposer._ascend``). Its ``kernel_block_size`` (the draft backend's first supported kernel
block size, which the per-step slot mapping takes as the block size on v0.21.0rc and v0.22.1rc, and
with a GDN target since 0.23.0) is the one the runner selects for the draft's group: vllm-ascend's
backends name one int (128), which the runner's selection takes for a group of their blocks; the tiny
backends take blocks of any size (vLLM's ``MultipleOf(1)``, which v0.22.1rc's step update would read
as 128 whatever the blocks).
"""

from __future__ import annotations

import dataclasses

from sim.impls.kit.ascend import draft_layers, mla
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.vllm_model import LAYER
from sim.impls.vllm_ascend.model import (
    INDEXER_LAYER,
    TinyAttentionBackend,
    TinyIndexerBackend,
    TinyMlaBackend,
    TinySfaBackend,
)

TARGET_LAYER = "model.layers.0.self_attn.attn"  # the target's attention layer, KV-cache group 0
KV_CACHE_GROUPS = 2  # the target's, the draft's
TARGET_BLOCKS_PER_DRAFT_BLOCK = 2  # the target group's block size: this many times the draft's


BACKENDS = {LAYER: TinyAttentionBackend, INDEXER_LAYER: TinyIndexerBackend}  # each draft layer's backend (GQA)
# the backend of ``LAYER`` per attention family
FAMILIES = {"gqa": TinyAttentionBackend, "mla": TinyMlaBackend, "sfa": TinySfaBackend}


def backends(attn: str = "gqa") -> dict:
    """Each draft layer's backend when ``LAYER`` is of the attention family ``attn``."""
    if attn not in FAMILIES:
        raise ValueError(f"attn={attn!r}: expected one of {sorted(FAMILIES)}")
    return {**BACKENDS, LAYER: FAMILIES[attn]}


def register_draft_layers(vllm_config, layers=(LAYER,), attn: str = "gqa") -> None:
    """The draft's attention layers in ``vllm_config``'s static forward context (once each), ``LAYER``
    of the attention family ``attn``."""
    draft_layers.register(vllm_config, {name: backends(attn)[name] for name in layers})


def kv_cache_config(block_size: int, hidden_size: int, layers=(LAYER,)):
    """vLLM's ``KVCacheConfig``: the target's group, then the draft's (its ``layers``) at ``block_size``."""
    interface = import_ascend("vllm.v1.kv_cache_interface")
    target = interface.KVCacheGroupSpec(
        [TARGET_LAYER], draft_layers.kv_cache_spec(TARGET_BLOCKS_PER_DRAFT_BLOCK * block_size, hidden_size)
    )
    # vLLM 0.18's groups have no is_eagle_group: its drafter finds its group by its layers' names.
    fields = {f.name for f in dataclasses.fields(interface.KVCacheGroupSpec)}
    eagle = {"is_eagle_group": True} if "is_eagle_group" in fields else {}
    draft = interface.KVCacheGroupSpec(list(layers), draft_layers.kv_cache_spec(block_size, hidden_size), **eagle)
    return interface.KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=[target, draft])


def kernel_block_sizes(config, attn: str = "gqa") -> list[list[int]]:
    """The runner's ``kernel_block_sizes``: per group, vLLM's ``select_common_block_size`` of its
    block size over its backends (the tiny attention's and, for the indexer layer, its twin)."""
    select = import_ascend("vllm.v1.worker.utils").select_common_block_size
    found = {**backends(attn), TARGET_LAYER: TinyAttentionBackend}
    return [
        [select(group.kv_cache_spec.block_size, [found[name] for name in group.layer_names])]
        for group in config.kv_cache_groups
    ]


def initialize(proposer, block_size: int, layers=(LAYER,), attn: str = "gqa") -> None:
    """``proposer.initialize_attn_backend`` as the runner calls it, for ``block_size``-token blocks,
    after the draft's layer names ``load_model`` would have found (the layers the tiny draft adds:
    ``layers``, sorted as ``load_model`` sorts them), ``LAYER`` of the attention family ``attn`` (MLA and
    SFA: vllm-ascend's rotary tables hold the tiny model's RoPE, ``mla.install_rotary``)."""
    draft_layers.check_block_size(attn, block_size)
    register_draft_layers(proposer.vllm_config, layers, attn)
    if attn != "gqa":  # MLA and SFA rotate by vllm-ascend's tables
        mla.install_rotary(proposer.vllm_config, proposer.device)
    proposer._draft_attn_layer_names = set(layers)
    proposer.attn_layer_names = sorted(layers)
    config = kv_cache_config(block_size, proposer.hidden_size, layers)
    current = import_ascend("vllm.config").set_current_vllm_config  # as a worker builds them (SFA's reads it)
    kernel = kernel_block_sizes(config, attn)
    (gid,) = [g for g, group in enumerate(config.kv_cache_groups) if LAYER in group.layer_names]
    proposer.kernel_block_size = kernel[gid][0]  # load_model's (it runs first), for the draft's group
    with draft_layers.drafting(proposer.vllm_config, proposer.num_speculative_tokens), current(proposer.vllm_config):
        proposer.initialize_attn_backend(config, kernel[0])
