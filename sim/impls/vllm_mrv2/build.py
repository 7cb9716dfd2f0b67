"""MRV2's ``MTPSpeculator`` and the runner's ``BlockTables``, built on CPU.

The speculator is vLLM's own class, constructed from the tiny DeepSeek-V3 config that
``sim.impls.vllm.eagle`` writes (no weights, no hub); one instance per hidden size serves every
case, its per-call sizes (K, ``max_model_len``) set before each use. What ``load_model`` and
``set_attn`` would wire from a loaded model and a KV-cache config is set here directly: the draft
model, one attention group, a one-group KV-cache config, the block tables (plumbing only: every
value the gate compares is computed by the speculator's kernels or ``BlockTables``' own methods).

``BlockTables.__init__`` cannot run on CPU: its staged-write buffers pin host memory
(``buffer_utils.UvaBuffer``: ``torch.zeros(..., pin_memory=True)``), which CPU torch refuses.
``block_tables`` builds the object without it and sets the fields ``compute_slot_mappings`` reads,
then derives the kernel's pointer and stride tensors with vLLM's ``init_block_table_layout_tensors``.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from sim.impls.kit import tiny_config
from sim.impls.vllm.eagle import vllm_config
from sim.impls.vllm.interop import import_vllm

CPU = torch.device("cpu")


@functools.lru_cache(maxsize=8)
def speculator(hidden_size: int):
    """One MRV2 ``MTPSpeculator`` per hidden size, with no CUDA-graph manager: ``init_cudagraph_manager``
    needs vLLM's pipeline-parallel group, and the adapter runs eagerly (``propose(is_profile=True)``)."""
    mtp = import_vllm("vllm.v1.worker.gpu.spec_decode.mtp.speculator")
    return mtp.MTPSpeculator(vllm_config(hidden_size), CPU)


def configured(num_spec_tokens: int, max_model_len: int, hidden_size: int):
    """The shared speculator set to one call's sizes: K (its ``draft_tokens`` buffer re-made at that
    width, as its constructor makes it) and ``max_model_len`` (a property of the model config)."""
    spec = speculator(hidden_size)
    tiny_config.refuse_past_limits("the MRV2 speculator", max_model_len)
    spec.vllm_config.model_config.max_model_len = max_model_len
    if spec.num_speculative_steps != num_spec_tokens:
        spec.num_speculative_steps = num_spec_tokens
        spec.draft_tokens = torch.zeros(spec.max_num_reqs, num_spec_tokens, dtype=torch.int64, device=CPU)
        spec.draft_token_confidence_probs = torch.empty_like(spec.draft_tokens, dtype=torch.float32)
    return spec


def start_fresh(spec) -> None:
    """Zero the buffers a newly built speculator starts with: rows MRV2 reads before it writes them
    (divergence ``stale-rejected-rows``) would otherwise hold an earlier run's ids and positions."""
    for buffer in (spec.input_buffers.input_ids, spec.input_buffers.positions, spec.hidden_states):
        buffer.zero_()


def block_tables(block_table: torch.Tensor, block_size: int, max_num_tokens: int):
    """vLLM's ``BlockTables`` holding ``block_table`` (request state r = batch row r), one KV group."""
    bt_module = import_vllm("vllm.v1.worker.gpu.block_table")
    table = block_table.to(torch.int32).contiguous().clone()
    bt = object.__new__(bt_module.BlockTables)
    bt.block_sizes, bt.num_kv_cache_groups, bt.device = [block_size], 1, CPU
    bt.max_num_reqs, bt.max_num_batched_tokens = table.shape[0], max_num_tokens
    bt.cp_size, bt.cp_rank, bt.cp_interleave = 1, 0, 1
    bt._slot_mapping_enabled, bt._sliding_window_reach = [True], [0]
    bt.has_sliding_window_groups = False
    bt.dcp_sharded = torch.tensor([True])
    bt.block_tables = [SimpleNamespace(gpu=table)]  # the staged tensor's device side, all it reads
    bt.input_block_tables = [table.clone()]  # what gather_block_tables would copy for this batch
    bt.slot_mappings = torch.zeros(1, max_num_tokens, dtype=torch.int64)
    bt.init_block_table_layout_tensors()
    return bt
