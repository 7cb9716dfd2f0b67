"""MRV2's ``MTPSpeculator`` and the runner's ``BlockTables``, built on CPU.

The speculator is vLLM's own class, constructed from the tiny DeepSeek-V3 config that
``sim.impls.kit.vllm_eagle`` writes (no weights, no hub); one instance per hidden size serves every
case, its per-call sizes (K, ``max_model_len``) set before each use. What ``load_model`` and
``set_attn`` would wire from a loaded model and a KV-cache config is set here directly: the draft
model, one attention group, a one-group KV-cache config, the block tables (plumbing only: every
value the gate compares is computed by the speculator's kernels or ``BlockTables``' own methods).

The runner's ``BlockTables`` is built by the kit (``sim.impls.kit.mrv2_runner.block_tables``).
"""

from __future__ import annotations

import functools

import torch

from sim.impls.kit import mrv2_runner
from sim.impls.kit.vllm_eagle import vllm_config
from sim.impls.kit.vllm_interop import import_vllm

CPU = torch.device("cpu")


SPECULATORS = {  # the method -> the speculator class vLLM's init_speculator picks for it (module, class)
    "mtp": ("vllm.v1.worker.gpu.spec_decode.mtp.speculator", "MTPSpeculator"),
    "eagle": ("vllm.v1.worker.gpu.spec_decode.eagle.speculator", "EagleSpeculator"),
    "eagle3": ("vllm.v1.worker.gpu.spec_decode.eagle.speculator", "EagleSpeculator"),
}


def speculator(hidden_size: int, method: str = "mtp"):
    """One MRV2 speculator per hidden size and method (``MTPSpeculator``, or ``EagleSpeculator`` for
    eagle and eagle3, as ``init_speculator`` picks), with no CUDA-graph manager: ``init_cudagraph_manager`` needs
    vLLM's pipeline-parallel group, and the adapter runs eagerly (``propose(is_profile=True)``)."""
    return _speculator(hidden_size, method)


@functools.lru_cache(maxsize=8)
def _speculator(hidden_size: int, method: str):
    module, name = SPECULATORS[method]
    return getattr(import_vllm(module), name)(vllm_config(hidden_size, method), CPU)


def configured(num_spec_tokens: int, max_model_len: int, hidden_size: int, method: str = "mtp"):
    """The shared speculator of ``method`` set to one call's sizes (the kit's ``mrv2_runner.resize``)."""
    spec = speculator(hidden_size, method)
    return mrv2_runner.resize(spec, "the MRV2 speculator", num_spec_tokens, max_model_len)


start_fresh = mrv2_runner.start_fresh
block_tables = mrv2_runner.block_tables  # the kit's: shared with vllm-ascend's MRV2 speculator
