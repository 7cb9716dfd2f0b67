"""The tiny attention's kernel face under ACL graphs: its host parameters as one captured task,
and a backend whose ``update_graph_params`` rewrites that task, as vllm-ascend's FIA backend does.

vllm-ascend's attention kernels (``npu_fused_infer_attention_score``) take the query and KV
lengths as host lists (``actual_seq_lengths_q``, ``seq_lens_list``) and the block table as a
tensor. In a captured graph those are the captured task's parameters: frozen at capture. After
launching each replay, vllm-ascend's ``update_full_graph_params`` calls the backend's
``update_graph_params``, which re-issues every captured task with this call's metadata inside
``graph_task_update_begin/end`` and records the event the task waits on.

Here the "kernel" is ``ascend_sim::fia_host_params``: the lengths and the block table in, the
device tensors the tiny attention reads out. Captured inside a task (``captured_task``, what the
real backend's ``full_graph_fia`` does: an event to wait on, the params, the task's handle, in
vllm-ascend's draft graph params), a replay reads the lists it was captured with until
``TinyAttentionImpl.update_graph_params`` rewrites them; a vllm-ascend that failed to update
would replay the capture's lengths (a dummy run's) and draft other tokens.
"""

from __future__ import annotations

import torch

from sim.impls.kit.ascend import mla, sfa
from sim.impls.kit.ascend.importing import import_ascend

_lib = torch.library.Library("ascend_sim", "DEF")
_lib.define(
    "fia_host_params(int[] seq_lens, int[] actual_seq_lengths_q, Tensor block_table, int rows, int width)"
    " -> (Tensor, Tensor, Tensor, Tensor)"
)


def _fia_host_params(
    seq_lens: list[int], actual_seq_lengths_q: list[int], block_table: torch.Tensor, rows: int, width: int
):
    """What the kernel reads, in shapes fixed by ``rows`` (the forward's token rows: no more requests)
    and ``width`` (block-table columns), whatever lists an update hands it, as an NPU kernel takes
    host lists of any length: ``rows`` lengths (0 past the list), ``rows + 1`` query offsets (the last
    repeated: requests past the list have no rows), the table (-1 where it has none), the bound."""
    n = len(seq_lens)
    if n > rows or len(actual_seq_lengths_q) != n:
        raise ValueError(f"fia_host_params: {n} seq_lens, {len(actual_seq_lengths_q)} query lengths, {rows} rows")
    with torch._C.DisableTorchFunction():  # the kernel's own host->device path, as host_param's
        device = block_table.device
        last = actual_seq_lengths_q[-1] if n else 0
        lens = torch.tensor([*seq_lens] + [0] * (rows - n), dtype=torch.int32, device=device)
        qsl = torch.tensor([0, *actual_seq_lengths_q] + [last] * (rows - n), dtype=torch.int32, device=device)
        bound = torch.tensor([max(seq_lens, default=0)], dtype=torch.int64, device=device)
        table = torch.full((rows, width), -1, dtype=block_table.dtype, device=device)
        r, w = min(n, block_table.shape[0]), min(width, block_table.shape[1])
        table[:r, :w] = block_table[:r, :w]
    return lens, qsl, table, bound


_lib.impl("fia_host_params", _fia_host_params, "CompositeExplicitAutograd")

fia_host_params = torch.ops.ascend_sim.fia_host_params.default


def host_params(meta, rows: int, width: int):
    """(seq_lens, query_start_loc, block_table, seq_len_bound) of ``meta`` as the kernel reads them
    in a forward of ``rows`` rows, the table ``width`` columns wide (MLA's: ``mla.kernel_lists``)."""
    if mla.is_mla(meta):
        seq_lens, queries, table = mla.kernel_lists(meta)
    else:
        seq_lens, queries, table = list(meta.seq_lens_list), list(meta.actual_seq_lengths_q), meta.block_tables
    return fia_host_params(seq_lens, queries, table, rows, width)


def captured_task(meta, num_tokens: int, layer: str):
    """``host_params(meta)`` captured as one task of the draft graph of ``num_tokens`` tokens, with
    the event it waits on and its handle in vllm-ascend's draft graph params."""
    params = import_ascend("vllm_ascend.compilation.acl_graph").get_draft_graph_params()
    if params is None or num_tokens not in params.handles:
        raise RuntimeError(f"no draft graph params for {num_tokens} tokens: set_draft_graph_params was not called")
    stream = torch.npu.current_stream()
    event = torch.npu.ExternalEvent()
    event.wait(stream)
    event.reset(stream)
    params.events[num_tokens].append(event)
    width = meta.block_tables.shape[1]
    params.attn_params[num_tokens].append((layer, width))
    torch.npu.graph_task_group_begin(stream)
    out = host_params(meta, num_tokens, width)
    params.handles[num_tokens].append(torch.npu.graph_task_group_end(stream))
    return out


def captured_reads(meta, num_tokens: int, layer: str):
    """What a captured forward's draft attention reads of ``meta``, per family, at each replay:
    (seq_lens, query_start_loc, block_table, seq_len_bound, rotation), the lengths from the captured task
    (``captured_task``: GQA and MLA, whose backends update it) or from the device tensors the step's build
    wrote in the graph (SFA, whose backend updates no task: ``sfa.kernel_tensors``), the rotation the
    metadata whose ``cos``/``sin`` it is rotated by (MLA's decode part, SFA's metadata) or None (GQA)."""
    if sfa.is_sfa(meta):
        return (*sfa.kernel_tensors(meta, num_tokens), meta)
    return (*captured_task(meta, num_tokens, layer), meta.decode if mla.is_mla(meta) else None)


class TinyAttentionImpl:
    """The impl class vllm-ascend's ``update_full_graph_params`` asks the draft backend for; a draft
    layer's instance holds its head count, as vLLM's builders read it."""

    def __init__(self, num_heads: int):
        self.num_heads = num_heads

    @staticmethod
    def update_graph_params(
        update_stream,
        forward_context,
        num_tokens,
        vllm_config,
        speculative_config=None,
        num_dcp_pcp_tokens=None,
        draft_attn_metadatas=None,
    ):
        """The draft branch of vllm-ascend's FIA ``update_graph_params`` (attention_v1.py): for each
        captured task of this size, in order, step by step and layer by layer, re-issue the kernel
        with that step's metadata inside a task update, then record the task's event."""
        params = import_ascend("vllm_ascend.compilation.acl_graph").get_draft_graph_params()
        steps = [(step, key) for step, per_step in enumerate(draft_attn_metadatas or []) for key in per_step]
        tasks = zip(params.attn_params[num_tokens], params.handles[num_tokens], params.events[num_tokens])
        with torch.npu.stream(update_stream):
            for (step, key), ((_layer, width), handle, event) in zip(steps, tasks):
                torch.npu.graph_task_update_begin(update_stream, handle)
                host_params(draft_attn_metadatas[step][key], num_tokens, width)
                torch.npu.graph_task_update_end(update_stream)
                event.record(update_stream)
