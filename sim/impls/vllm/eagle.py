"""vLLM's ``EagleProposer`` (the V1 MTP path) built on CPU from a tiny local config.

A ``deepseek_v3`` config with one next-n layer makes vLLM choose the MTP
method; nothing is downloaded and no weights are loaded. The proposer's
buffers are sized once, generously (``MAX_TOKENS`` rows, ``MAX_REQS``
requests), so one instance per hidden size serves every test case; the
per-call sizes (K, ``max_model_len``, ``block_size``) are set before each use.
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from pathlib import Path

import torch

from sim.impls.fresh_start import remember_fresh
from sim.impls.vllm.interop import import_vllm

MAX_TOKENS = 8192
MAX_REQS = 256
MAX_MODEL_LEN = 4096


def _config_dir(hidden_size: int) -> str:
    """A ``config.json`` vLLM reads as DeepSeek-V3 with one MTP layer."""
    path = Path(tempfile.mkdtemp(prefix="mtp_harness_dsv3_"))
    config = {
        "model_type": "deepseek_v3",
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_nextn_predict_layers": 1,
        "hidden_size": hidden_size,
        "intermediate_size": 64,
        "moe_intermediate_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": 4096,
        "max_position_embeddings": MAX_MODEL_LEN,
        "kv_lora_rank": 16,
        "q_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 8,
        "v_head_dim": 8,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "first_k_dense_replace": 1,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def vllm_config(hidden_size: int):
    """A fresh ``VllmConfig`` of the tiny DeepSeek-V3 with one MTP layer, on CPU (also the base of
    ``sim.impls.vllm_mrv2``'s speculator; each call is a new object, so per-call sizes set on one
    never reach another)."""
    import_vllm()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    config = import_vllm("vllm.config")
    model_config = config.ModelConfig(
        model=_config_dir(hidden_size), max_model_len=MAX_MODEL_LEN, dtype="float32", skip_tokenizer_init=True
    )
    spec_config = config.SpeculativeConfig(
        target_model_config=model_config,
        target_parallel_config=config.ParallelConfig(),
        method="mtp",
        num_speculative_tokens=2,  # > 1 so that every buffer for later steps exists; set per call
    )
    return config.VllmConfig(
        model_config=model_config,
        cache_config=config.CacheConfig(block_size=16),
        speculative_config=spec_config,
        device_config=config.DeviceConfig(device="cpu"),
        parallel_config=config.ParallelConfig(),
        load_config=config.LoadConfig(),
        scheduler_config=config.SchedulerConfig(
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            max_num_batched_tokens=MAX_TOKENS,
            max_num_seqs=MAX_REQS,
        ),
    )


@functools.lru_cache(maxsize=8)
def eagle_proposer(hidden_size: int):
    """One ``EagleProposer`` per hidden size (its hidden-state buffer's width), on CPU, its buffers as
    built remembered so that every run can start from them (``sim.impls.fresh_start``)."""
    eagle = import_vllm("vllm.v1.spec_decode.eagle")
    return remember_fresh(eagle.EagleProposer(vllm_config=vllm_config(hidden_size), device=torch.device("cpu")))


def configured(num_spec_tokens: int, block_size: int, max_model_len: int, hidden_size: int):
    """The shared proposer, set to one call's sizes (``block_size`` is normally set by
    ``initialize_attn_backend``, which needs a loaded model)."""
    if max_model_len > MAX_MODEL_LEN:
        raise ValueError(f"max_model_len={max_model_len}: the vLLM oracle is built for at most {MAX_MODEL_LEN}")
    proposer = eagle_proposer(hidden_size)
    proposer.num_speculative_tokens = num_spec_tokens
    proposer.block_size = block_size
    proposer.max_model_len = max_model_len
    return proposer
