"""The attention group and draft model behind vllm-ascend's MRV2 speculator: what an Ascend backend reads.

vllm-ascend's MRV2 speculator builds every step's attention metadata through its own
``build_attn_metadata`` (``worker/v2/attn_utils.py``), which asks each attention group's builder to
``build(common_prefix_len=0, common_attn_metadata=AscendCommonAttentionMetadata)``, and then edits
the built metadata before (0.23.0) or after (main) the step's forward: ``seq_lens_list``,
``actual_seq_lengths_q``, ``seq_lens_cpu``, ``attn_state``. ``AscendMetadataGroup`` is that group, the
draft layer's KV-cache spec with it, and its builder the checkout's own of the layer's attention family
(``AscendAttentionMetadataBuilder``, ``AscendMLAMetadataBuilder`` or ``AscendSFAMetadataBuilder``), built as
the runner's attention setup builds it, its builds on the simulator's host memory
(``sim.impls.kit.ascend.host_memory``: plumbing); nothing of the build replaced.

``AscendMrv2TinyMtp`` reads that object at the forward, as the NPU kernels do (an MLA or SFA layer's as
``sim.impls.kit.ascend.mla`` and ``sfa`` read theirs); a GQA layer's: the fused attention
(``npu_fused_infer_attention_score``) takes ``actual_seq_lengths_kv = seq_lens_list`` and
``actual_seq_lengths = actual_seq_lengths_q`` (host lists) and the block table; the KV write
(``reshape_and_cache``) takes ``slot_mapping``. Whatever vllm-ascend wrote into the object between
build and forward is what the tiny attention sees; the device ``seq_lens`` is not read (the eager
kernels take the lists). The draft model returns a tuple, as vllm-ascend's DeepSeek MTP layer does
(``patch_deepseek_mtp``: the pre-norm hidden for logits, the post-norm one fed back).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch

from mtp.model import AttentionMeta
from mtp.trace import StepRecord
from sim.impls.kit.ascend import draft_layers, fake_npu_graphs, interop, kernel_blocks, mla, sfa, tiny_attention
from sim.impls.kit.ascend.host_memory import unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.ascend.world import build_device
from sim.impls.kit.vllm_model import LAYER, VllmTinyMtp, replayed_record, rotated_positions

__all__ = ["LAYER", "AscendMetadataGroup", "AscendMrv2TinyMtp", "attention_meta", "kv_cache_config"]


def kv_cache_config(layers=(LAYER,)):
    """The one KV-cache group of the draft's layers (``build_attn_metadata`` and ``build_slot_mappings_by_layer``
    read its layer names)."""
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=list(layers))])


# each draft attention family's builder in the checkout (module, class)
BUILDERS = {
    "gqa": ("vllm_ascend.attention.attention_v1", "AscendAttentionMetadataBuilder"),
    "mla": ("vllm_ascend.attention.mla_v1", "AscendMLAMetadataBuilder"),
    "sfa": ("vllm_ascend.attention.sfa_v1", "AscendSFAMetadataBuilder"),
}


class AscendMetadataGroup:
    """Duck-types vLLM's ``AttentionGroup`` for vllm-ascend's ``build_attn_metadata``: the draft layer's group,
    its builder the checkout's own of the layer's attention family ``attn`` (``builder``), built as the
    runner's attention setup builds it: the layer registered (``draft_layers``), for the call's draft count;
    an MLA layer's rotation from vllm-ascend's tables, which hold the tiny model's RoPE (``mla.install_rotary``)."""

    kv_cache_group_id = 0

    def __init__(
        self, vllm_config, block_size: int, head_size: int, num_spec_tokens: int, attn: str = "gqa", layer: str = LAYER
    ):
        if attn not in BUILDERS:
            raise ValueError(f"draft_attn={attn!r}: expected one of {sorted(BUILDERS)}")
        draft_layers.check_block_size(attn, block_size)
        self.attn, self.layer_names = attn, [layer]
        self.kv_cache_spec = draft_layers.kv_cache_spec(block_size, head_size)
        self.backend = backend = _backend(attn, layer)
        draft_layers.register(vllm_config, {layer: backend})
        if attn != "gqa":
            mla.install_rotary(vllm_config, build_device())
        current = import_ascend("vllm.config").set_current_vllm_config
        with draft_layers.drafting(vllm_config, num_spec_tokens), current(vllm_config):
            self.builder = backend.get_builder_cls()(self.kv_cache_spec, self.layer_names, vllm_config, build_device())

    def get_metadata_builder(self, ubatch_idx: int = 0):
        return self.builder

    def build(self, common_prefix_len: int, common_attn_metadata, **kwargs):
        return self.builder.build(common_prefix_len, common_attn_metadata, **kwargs)


@functools.cache
def _backend(attn: str, layer: str) -> type:
    """The backend of the draft layer ``layer`` of family ``attn`` (one class per layer: vLLM groups a draft's
    layers by backend): the checkout's builder, its builds on the simulator's host memory (``unpinned_host_memory``:
    plumbing)."""
    module, name = BUILDERS[attn]
    real = getattr(import_ascend(module), name)

    class OnTheSimulator(real):
        def build(self, *args, **kwargs):
            with unpinned_host_memory():
                return super().build(*args, **kwargs)

    class TinyMrv2Backend:
        get_builder_cls = staticmethod(lambda: OnTheSimulator)
        get_impl_cls = staticmethod(lambda: tiny_attention.TinyAttentionImpl)
        get_name = staticmethod(lambda: f"TINY_MRV2_{attn.upper()}_{layer.upper()}")

    return TinyMrv2Backend


def attention_meta(meta) -> AttentionMeta:
    """What the eager NPU kernels read of an ``AscendMetadata``, as the core's type: the host lists
    (``actual_seq_lengths_q`` as query ends, ``seq_lens_list`` as KV lengths, their max as the host
    bound), the block table, the slots, and whether any cached context is read (``PrefillNoCache``
    reads none: ``AttentionMeta.own_rows_only``, as for the V1 drafter's ``builders.read_back``)."""
    ends = [int(x) for x in meta.actual_seq_lengths_q]
    lens = [int(x) for x in meta.seq_lens_list[: len(ends)]]
    return AttentionMeta(
        query_start_loc=torch.tensor([0, *ends], dtype=torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        block_table=kernel_blocks.fold(meta.block_tables[: len(ends)], lens),  # a hybrid target's: the blocks read
        slot_mapping=meta.slot_mapping,
        seq_len_bound=torch.tensor([max(lens, default=0)], dtype=torch.int64),
        own_rows_only=interop.reads_no_cached_context(meta.attn_state),
    )


class AscendMrv2TinyMtp(VllmTinyMtp):
    """``TinyMtp`` as vllm-ascend's MRV2 draft model: attention reads the metadata it was handed, as the kernels
    of its family read it (an MLA or SFA layer's: ``mla.read_back``, ``sfa.read_back``, the rotation included).

    Inside a graph capture (the decode steps' merged graph, ``graphs``) a GQA or MLA layer's attention takes its
    lengths from its captured task (``tiny_attention.captured_task``: what the FIA kernel was handed, until
    vllm-ascend's update rewrites it), an SFA layer's from the device tensors its step's build wrote in the graph
    (``sfa.kernel_tensors``: its backend updates no task); its slots from the metadata's tensor, an MLA or SFA
    layer its rotation from the cos/sin its build gathered; each forward's record is tensors the replays
    rewrite, turned into a ``StepRecord`` after each replay (``num_reqs``: the call's requests, set by the
    adapter)."""

    num_reqs = 0

    def forward(self, input_ids, positions, hidden_states=None, inputs_embeds=None, **kwargs):
        graph = fake_npu_graphs.capturing_graph()
        if graph is None:
            return super().forward(input_ids, positions, hidden_states, inputs_embeds, **kwargs)
        context = import_ascend("vllm.forward_context").get_forward_context()
        attn, n = context.attn_metadata[LAYER], input_ids.shape[0]
        seq_lens, qsl, table, bound, rotation = tiny_attention.captured_reads(attn, n, LAYER)
        slots = attn.slot_mapping[:n].to(torch.int64)
        live = {"input_ids": input_ids, "positions": positions, "seq_lens": seq_lens, "qsl": qsl, "slots": slots}
        live["table"], table = table, kernel_blocks.on_device(table)  # a hybrid target's kernel blocks: checked after
        if rotation is not None:  # rotated by the cos/sin the step's build gathered (a gather the graph replays)
            live["rope"] = mla.rope_positions(rotation.cos[:n], rotation.sin[:n])
            positions = rotated_positions(live["rope"], positions)
        out = self.tiny.forward(input_ids, positions, hidden_states, AttentionMeta(qsl, seq_lens, table, slots, bound))
        live = {name: t.clone() for name, t in (live | {"bound": bound}).items()}  # copies each replay rewrites
        if not graph.after_replay:
            graph.after_replay.append(lambda: self._replayed(graph))
        graph.records = [*getattr(graph, "records", []), live]
        return self.outputs(out)

    def _replayed(self, graph) -> None:
        for live in graph.records:
            self.calls += 1
            kernel_blocks.check(live["table"], live["seq_lens"][: self.num_reqs].tolist())
            if self.trace is not None:
                self.trace.append(self._step(self.calls, live))

    def _step(self, call: int, live: dict) -> StepRecord:
        """A replayed draft step's record (one row per request), the call's requests only."""
        return replayed_record(call, live, self.num_reqs, self.num_reqs, torch.arange(self.num_reqs))

    def read(self, meta) -> AttentionMeta:
        if mla.is_mla(meta):
            return mla.read_back(meta)
        return sfa.read_back(meta) if sfa.is_sfa(meta) else attention_meta(meta)

    def slots(self, context, attn: AttentionMeta) -> torch.Tensor:
        return attn.slot_mapping.to(torch.int64)  # reshape_and_cache takes the metadata's slots
