"""The tiny DeepSeek-V3 ``VllmConfig`` every vLLM-based proposer is built from, and a shared proposer's limits.

A ``deepseek_v3`` config with one next-n layer makes vLLM choose the MTP method; with method
``eagle`` or ``eagle3`` the draft is a one-layer Llama config, which vLLM makes an
``EagleLlamaForCausalLM`` or ``Eagle3LlamaForCausalLM`` (what EAGLE heads of Llama and Qwen targets
are); with ``draft_model`` the same Llama config is the draft language model (the target's vocabulary).
Nothing is downloaded and no weights are loaded.
Each adapter builds one proposer per hidden size with buffers sized once, generously (``MAX_TOKENS``
rows, ``MAX_REQS`` requests, ``MAX_MODEL_LEN``), and sets the per-call sizes before each use;
``refuse_past_limits`` refuses a call the buffers cannot hold, naming the field and its value.
"""

from __future__ import annotations

import contextlib
import json
from unittest import mock

from mtp.config import METHODS
from sim.impls.kit.scratch import scratch

MAX_TOKENS = 8192
MAX_REQS = 256
MAX_MODEL_LEN = 65536  # a 64k-token context (tests/properties/test_propose_loop.py: LONG_CONTEXT)


def config_dir(hidden_size: int) -> str:
    """A ``config.json`` vLLM reads as DeepSeek-V3 with one MTP layer."""
    path = scratch(f"dsv3-{hidden_size}")
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


def eagle_dir(hidden_size: int) -> str:
    """A ``config.json`` of a one-layer Llama that vLLM wraps as an EAGLE or EAGLE-3 draft (``EAGLEConfig``)."""
    return _llama_dir(f"eagle-{hidden_size}", hidden_size)


def draft_model_dir(hidden_size: int) -> str:
    """The same one-layer Llama as a draft model of its own (method ``draft_model``), in a folder whose name
    does not say EAGLE: vLLM's ``SpeculativeConfig`` takes a draft whose path holds "eagle-" for an EAGLE
    head and sets its method to ``eagle``, whatever method it was given."""
    return _llama_dir(f"draft-lm-{hidden_size}", hidden_size)


def _llama_dir(name: str, hidden_size: int) -> str:
    path = scratch(name)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden_size,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "vocab_size": 4096,
        "max_position_embeddings": MAX_MODEL_LEN,
        "torch_dtype": "float32",
    }
    (path / "config.json").write_text(json.dumps(config))
    return str(path)


def _model_classes_inspected_here():
    """vLLM inspects a model class (DeepSeek-V3, then its MTP draft) in a fresh interpreter, so as not
    to initialise CUDA in its own, unless ``VLLM_CACHE_ROOT`` holds the answer: about 14 s each, in
    every process whose cache misses (both workers of a fresh env's first session, side by side).
    This process has no CUDA to initialise, so the class is inspected here, from the same module: the
    same model info (under the fake ``torch_npu`` too, whose mocks none of its fields come from)."""
    from vllm.model_executor.models import registry

    if not hasattr(registry, "_run_in_subprocess"):  # a vLLM that inspects otherwise
        return contextlib.nullcontext()
    return mock.patch.object(registry, "_run_in_subprocess", lambda inspect: inspect())


def vllm_config(config, hidden_size: int, num_speculative_tokens: int, device: str, method: str = "mtp"):
    """A fresh ``VllmConfig`` of the tiny DeepSeek-V3 with one MTP layer (``method`` eagle or eagle3: with
    the EAGLE or EAGLE-3 draft of ``eagle_dir`` instead; draft_model: the draft model of
    ``draft_model_dir``), from ``config`` (the generation's ``vllm.config``
    module) on ``device``; ``num_speculative_tokens``: the most drafts any call sets (every per-step
    buffer exists for them)."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: expected one of {METHODS}")
    draft_dir = {"eagle": eagle_dir, "eagle3": eagle_dir, "draft_model": draft_model_dir}.get(method)
    draft = {"model": draft_dir(hidden_size)} if draft_dir else {}
    with _model_classes_inspected_here():  # the target's class, then (in SpeculativeConfig) the draft's
        model_config = config.ModelConfig(
            model=config_dir(hidden_size), max_model_len=MAX_MODEL_LEN, dtype="float32", skip_tokenizer_init=True
        )
        spec_config = config.SpeculativeConfig(
            target_model_config=model_config,
            target_parallel_config=config.ParallelConfig(),
            method=method,
            num_speculative_tokens=num_speculative_tokens,
            **draft,
        )
    built = config.VllmConfig(
        model_config=model_config,
        cache_config=config.CacheConfig(block_size=16),
        speculative_config=spec_config,
        device_config=config.DeviceConfig(device=device),
        parallel_config=config.ParallelConfig(),
        load_config=config.LoadConfig(),
        scheduler_config=config.SchedulerConfig(
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            max_num_batched_tokens=MAX_TOKENS,
            max_num_seqs=MAX_REQS,
        ),
    )
    # Without chunked prefill vLLM raises the token budget to max_model_len (65536), and every buffer sized
    # by it (MRV2's kernels pad theirs on each call) with it; a harness batch holds MAX_TOKENS rows at most.
    built.scheduler_config.max_num_batched_tokens = MAX_TOKENS
    return built


def refuse_past_limits(built: str, max_model_len: int, num_spec_tokens: int | None = None, max_spec: int = 0) -> None:
    """``ValueError`` naming the field and value when a call needs more than ``built`` (e.g. "the vLLM
    oracle") was built for: ``max_model_len`` past ``MAX_MODEL_LEN``, or ``num_spec_tokens`` outside
    1..``max_spec`` (checked when given)."""
    if num_spec_tokens is not None and not 1 <= num_spec_tokens <= max_spec:
        raise ValueError(f"num_spec_tokens={num_spec_tokens}: {built} is built for 1..{max_spec}")
    if max_model_len > MAX_MODEL_LEN:
        raise ValueError(f"max_model_len={max_model_len}: {built} is built for at most {MAX_MODEL_LEN}")
