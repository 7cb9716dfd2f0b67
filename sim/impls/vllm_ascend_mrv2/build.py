"""vllm-ascend's MRV2 MTP speculator, built on CPU by vllm-ascend's own ``init_speculator``.

The config is the V1 adapter's (``sim.impls.kit.ascend.world``: the kit's tiny DeepSeek-V3
``VllmConfig`` with one next-n layer, method ``mtp``, vllm-ascend's config initialised, one gloo
rank); ``init_speculator`` picks the class as the NPU model runner does. One speculator per hidden
size serves every case, its per-call sizes set by the kit (``mrv2_runner.resize``). What ``load_model``
and ``set_attn`` would wire from a loaded model and a KV-cache config is set by the adapter: the draft
model, the attention group, the KV-cache config, the runner's block tables (the kit's
``mrv2_runner.block_tables``), the per-step metadata handling of the draft layer's family
(``generation.set_attn_architecture``, set by the adapter per call).
No CUDA/ACL-graph manager is made (eager only: ``propose(is_profile=True)``).
"""

from __future__ import annotations

import functools

import torch

from sim.impls.kit import mrv2_runner
from sim.impls.kit.ascend import world
from sim.impls.vllm_ascend_mrv2 import generation

CPU = torch.device("cpu")
WHO = "vllm-ascend's MRV2 speculator"


def speculator(hidden_size: int, method: str = "mtp"):
    """One speculator per hidden size and drafting method, as ``NPUModelRunner.__init__`` (worker/v2) makes it."""
    return _speculator(hidden_size, method)


@functools.lru_cache(maxsize=8)
def _speculator(hidden_size: int, method: str):
    init = generation.init_speculator()
    vllm_config = world.vllm_config(hidden_size, method)
    world.single_rank_world(vllm_config)
    spec = init(vllm_config, world.build_device())
    return spec


def configured(num_spec_tokens: int, max_model_len: int, hidden_size: int, method: str = "mtp"):
    """The shared speculator of drafting ``method`` set to one call's sizes."""
    return mrv2_runner.resize(speculator(hidden_size, method), WHO, num_spec_tokens, max_model_len)
