"""The draft's attention layers as a vllm-ascend runner's attention setup finds them, for its metadata builders.

vllm-ascend's builders are built by the runner's attention setup for the layers of a KV-cache group, and read
the layers back from the config's static forward context: vLLM's MLA builder (0.27 on) the layer's head count
(``get_num_attention_heads_from_layers``) and the prefill backend it keeps. ``register`` puts each draft layer
there as vLLM's layers describe themselves (its backend, KV spec and ``impl``), as a model's attention layers
register themselves when built; ``drafting`` sets the speculative config's draft count a builder reads when
built (its ``decode_threshold``), as a runner's builders are built for the configuration it serves.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.vllm_model import INDEXER_LAYER, LAYER

# the draft's layers per number of its attention groups (a second layer of another backend in the same KV-cache
# group, as an MLA/SFA MTP layer's indexer key cache), sorted
DRAFT_LAYERS = {1: (LAYER,), 2: (LAYER, INDEXER_LAYER)}
# why an MLA or SFA draft has one group here
ONE_GROUP = "an MLA draft is one attention layer here (its indexer's group is the SFA family's, not modelled)"


def layers_of(attn: str, groups: int) -> tuple[str, ...]:
    """The draft's layers for ``groups`` attention groups, ``LAYER`` of family ``attn``; ``ValueError`` naming the
    field where the adapters drive no such draft."""
    if groups not in DRAFT_LAYERS:
        raise ValueError(f"draft_attn_groups={groups!r}: expected one of {sorted(DRAFT_LAYERS)}")
    if attn != "gqa" and groups > 1:
        raise ValueError(f"draft_attn={attn!r} with draft_attn_groups={groups}: {ONE_GROUP}")
    return DRAFT_LAYERS[groups]


def check_block_size(attn: str, block_size: int) -> None:
    """``ValueError`` naming the field where the checkout's kernels of the draft attention family ``attn`` take no
    blocks of ``block_size`` tokens (SFA's: multiples of its kernel block)."""
    if attn != "sfa":
        return
    kernel = import_ascend("vllm_ascend.attention.sfa_v1").AscendSFABackend.get_supported_kernel_block_sizes()
    if not any(block_size % k == 0 for k in kernel):
        raise ValueError(
            f"draft_attn='sfa' with block_size={block_size}: the checkout's SFA kernels take blocks of {kernel}"
            " tokens (AscendSFABackend.get_supported_kernel_block_sizes)"
        )


def kv_cache_spec(block_size: int, head_size: int):
    """The tiny draft layer's KV-cache spec: vLLM's ``FullAttentionSpec``, one KV head of ``head_size``."""
    interface = import_ascend("vllm.v1.kv_cache_interface")
    return interface.FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_size, dtype=torch.float32)


class UnusedPrefillBackend:
    """What vLLM's MLA builder keeps of an MLA layer's prefill kernels (from 0.27 on a clone of it per
    builder); vllm-ascend's MLA builder never calls it."""

    def clone(self):
        return self


@functools.cache
def layer_class(backend):
    """A tiny draft attention layer of ``backend`` as vLLM's layers describe themselves."""
    base = import_ascend("vllm.model_executor.layers.attention_layer_base").AttentionLayerBase

    class DraftAttention(base):
        """A tiny draft attention layer as vLLM's layers describe themselves: its backend and KV spec,
        and its ``impl`` (the backend's) with the layer's head count, which vLLM's MLA builder reads
        from 0.27 on (``get_num_attention_heads_from_layers``), and the ``prefill_backend`` it keeps."""

        prefill_backend = UnusedPrefillBackend()

        def __init__(self, num_heads: int):
            super().__init__()
            self.impl = backend.get_impl_cls()(num_heads)

        def get_attn_backend(self):
            return backend

        def get_kv_cache_spec(self, vllm_config):
            return kv_cache_spec(vllm_config.cache_config.block_size, vllm_config.model_config.get_head_size())

    return DraftAttention


def register(vllm_config, backends: dict) -> None:
    """Each draft layer (name -> its backend) in ``vllm_config``'s static forward context, once each."""
    context = vllm_config.compilation_config.static_forward_context
    num_heads = vllm_config.model_config.get_num_attention_heads(vllm_config.parallel_config)
    for name, backend in backends.items():
        cls = layer_class(backend)
        if not isinstance(context.get(name), cls):
            context[name] = cls(num_heads)


@contextlib.contextmanager
def drafting(vllm_config, num_speculative_tokens: int):
    """``vllm_config``'s speculative config drafting ``num_speculative_tokens`` inside the block: the
    metadata builders read it when built (their ``decode_threshold``, ``num_speculative_tokens + 1``),
    as a runner's are built for the configuration it serves. The proposer is built once, for the most
    drafts any call takes (``world.MAX_SPEC_TOKENS``, its per-step buffers)."""
    spec = vllm_config.speculative_config
    built_for = spec.num_speculative_tokens
    spec.num_speculative_tokens = num_speculative_tokens
    try:
        yield
    finally:
        spec.num_speculative_tokens = built_for
