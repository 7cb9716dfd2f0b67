"""vLLM's ``EagleProposer`` (the V1 MTP path) built on CPU from a tiny local config.

The config is the kit's tiny DeepSeek-V3 (``sim.impls.kit.tiny_config``: vLLM
chooses the MTP method, or builds an EAGLE-3 drafter; nothing downloaded, no weights). The proposer's
buffers are sized once, generously (``MAX_TOKENS`` rows, ``MAX_REQS``
requests), so one instance per hidden size serves every test case; the
per-call sizes (K, ``max_model_len``, ``block_size``) are set before each use.
"""

from __future__ import annotations

import functools
import logging

import torch

from sim.impls.kit import tiny_config
from sim.impls.kit.fresh_start import remember_fresh
from sim.impls.kit.vllm_interop import import_vllm


def vllm_config(hidden_size: int, method: str = "mtp"):
    """A fresh ``VllmConfig`` of the tiny DeepSeek-V3 with one MTP layer (``method="eagle3"``: an EAGLE-3
    draft), on CPU (also the base of ``sim.impls.vllm_mrv2``'s speculator; each call is a new object, so
    per-call sizes set on one never reach another)."""
    import_vllm()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    # K > 1 so that every buffer for later steps exists; set per call
    return tiny_config.vllm_config(import_vllm("vllm.config"), hidden_size, 2, "cpu", method)


def eagle_proposer(hidden_size: int, method: str = "mtp"):
    """One ``EagleProposer`` (for ``draft_model``: vLLM's ``DraftModelProposer``, on the same base) per hidden
    size (its hidden-state buffer's width) and drafting method, on CPU, its buffers as built remembered so
    that every run can start from them (``sim.impls.kit.fresh_start``)."""
    return _eagle_proposer(hidden_size, method)


@functools.lru_cache(maxsize=8)
def _eagle_proposer(hidden_size: int, method: str):
    if method == "draft_model":
        drafter = import_vllm("vllm.v1.spec_decode.draft_model").DraftModelProposer
    else:
        drafter = import_vllm("vllm.v1.spec_decode.eagle").EagleProposer
    config = vllm_config(hidden_size, method)
    return remember_fresh(drafter(vllm_config=config, device=torch.device("cpu")))


def configured(num_spec_tokens: int, block_size: int, max_model_len: int, hidden_size: int, method: str = "mtp"):
    """The shared proposer of drafting ``method``, set to one call's sizes (``block_size`` is normally set
    by ``initialize_attn_backend``, which needs a loaded model)."""
    tiny_config.refuse_past_limits("the vLLM oracle", max_model_len)
    proposer = eagle_proposer(hidden_size, method)
    proposer.num_speculative_tokens = num_spec_tokens
    proposer.block_size = block_size
    proposer.max_model_len = max_model_len
    return proposer
