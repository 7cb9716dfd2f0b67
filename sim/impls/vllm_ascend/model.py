"""The tiny MTP model behind vllm-ascend's interfaces, reading the metadata vllm-ascend's own builder built.

vllm-ascend's ``_propose`` builds each step's attention metadata itself: step 1
through ``draft_attn_groups[0].get_metadata_builder().build(...)``, steps 2..K
through ``attn_update_stack_num_spec_norm``, which calls
``build_for_drafting(cad, draft_index)``, every step's before the first
forward. The builder is the checkout's ``AscendAttentionMetadataBuilder``
(attention_v1.py), recording (``builders``): it hands the NPU kernels the lengths
as host lists taken at build (``seq_lens_list`` from ``_seq_lens_cpu``, else
``seq_lens_cpu``; ``actual_seq_lengths_q`` from ``query_start_loc_cpu``), the block
table and the slots, and the tiny attention reads exactly those, with the host bound
``max(seq_lens_list)``; so a stale mirror changes the drafts. ``AscendTinyMtp`` reads
the metadata back from the forward context as it is at the forward and takes its KV
slots from it. ``AscendSnapshotAttnGroup`` builds the same fields without vllm-ascend's
builder, for the single-step checks (``adapter.advance_steps``).

Under ACL graphs (full-graph mode), the forward that runs is the one inside the capture: there the
attention takes its lengths through ``tiny_attention.captured_task`` (the kernel's host
parameters as one captured task: frozen at capture, rewritten only by the backend's
``update_graph_params``), and its record of the call is a set of tensors the replay rewrites;
after each replay (``NPUGraph.after_replay``) they become the call's ``StepRecord``s.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from devices.sim import early_reads
from mtp.model import AttentionMeta
from mtp.trace import StepRecord
from sim.impls.kit.ascend import fake_npu_graphs, kernel_blocks, mla, tiny_attention
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.metadata_checks import RecordedMeta, host_seq_lens
from sim.impls.kit.vllm_model import (
    INDEXER_LAYER,
    LAYER,
    SnapshotAttnGroup,
    VllmTinyMtp,
    draft_class,
    replayed_record,
    rotated_positions,
    rows_of_slots,
)
from sim.impls.kit.vllm_types import import_vllm
from sim.impls.vllm_ascend import builders, lmhead_tp

__all__ = [
    "INDEXER_LAYER",
    "LAYER",
    "AscendSnapshotAttnGroup",
    "AscendTinyMtp",
    "draft_model",
    "TinyAttentionBackend",
    "TinyIndexerBackend",
    "TinyMlaBackend",
    "TinySfaBackend",
]


class TinyAttentionBackend:
    """The draft layer's attention backend (``draft_attn_groups[0].backend``): its metadata builder
    (the checkout's ``AscendAttentionMetadataBuilder``, recording: ``builders``), its impl
    (what ``_update_full_graph_params`` hands ``update_full_graph_params``), and the kernel block
    sizes it supports: any (the tiny attention reads the paged cache at any block size)."""

    @staticmethod
    def get_impl_cls():
        return tiny_attention.TinyAttentionImpl

    @staticmethod
    def get_builder_cls():
        return builders.attention_builder()

    @staticmethod
    def get_name() -> str:
        return "TINY_ATTENTION"

    @classmethod
    def full_cls_name(cls) -> tuple[str, str]:
        return (cls.__module__, cls.__qualname__)

    @staticmethod
    def get_supported_kernel_block_sizes():
        return [import_ascend("vllm.v1.attention.backend").MultipleOf(1)]


class TinyIndexerBackend(TinyAttentionBackend):
    """The second draft layer's backend: the tiny attention under another name, so that the draft's
    layers form two attention groups (vLLM groups a draft's layers by backend), as an MLA/SFA draft
    layer and its indexer do."""

    @staticmethod
    def get_name() -> str:
        return "TINY_INDEXER"


class TinyMlaBackend(TinyAttentionBackend):
    """The draft layer's backend in the MLA family: its metadata builder is the checkout's
    ``AscendMLAMetadataBuilder``, recording (``builders.mla_builder``; what the tiny attention reads of
    it: ``mla.read_back``, in a captured graph ``mla.kernel_lists`` and the captured cos/sin)."""

    @staticmethod
    def get_builder_cls():
        return builders.mla_builder()

    @staticmethod
    def get_name() -> str:
        return "TINY_MLA"


class TinySfaBackend(TinyAttentionBackend):
    """The draft layer's backend in the SFA family: its metadata builder is the checkout's
    ``AscendSFAMetadataBuilder``, recording (``builders.sfa_builder``; what the tiny attention reads of
    it: ``sfa.read_back``, in a captured graph ``sfa.kernel_tensors`` and the captured cos/sin)."""

    @staticmethod
    def get_builder_cls():
        return builders.sfa_builder()

    @staticmethod
    def get_name() -> str:
        return "TINY_SFA"


class AscendSnapshotAttnGroup(SnapshotAttnGroup):
    """Duck-types vllm-ascend's attention group and metadata builder."""

    backend = TinyAttentionBackend
    kv_cache_spec = None

    def get_metadata_builder(self):
        return self

    def build(self, common_prefix_len, common_attn_metadata, model=None, **_):
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=0)

    def build_for_drafting(self, common_attn_metadata, draft_index, **_):
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=draft_index)

    def build_for_graph_capture(self, common_attn_metadata, attn_state=None, **_):
        """A dummy run's metadata for a capture (vllm-ascend builds every step's this way)."""
        return self.build_metadata_for_drafting(common_attn_metadata, draft_index=None)

    def build_metadata_for_drafting(self, common_attn_metadata, draft_index):
        """The recorded metadata, with the kernel's host parameters as vllm-ascend's ``AscendMetadata``
        holds them: ``seq_lens_list``, ``actual_seq_lengths_q`` (lists) and ``block_tables``."""
        meta = super().build_metadata_for_drafting(common_attn_metadata, draft_index)
        cad = common_attn_metadata
        n = cad.num_reqs
        meta.seq_lens_list = host_seq_lens(cad)[:n].tolist()
        meta.actual_seq_lengths_q = cad.query_start_loc_cpu[1 : n + 1].tolist()
        meta.block_tables = cad.block_table_tensor
        return meta

    def attention_meta(self, cad) -> AttentionMeta:
        """What vllm-ascend's attention builder gives the kernels: host lengths, as lists taken at build."""
        n, device = cad.num_reqs, cad.seq_lens.device
        seq_lens_list = host_seq_lens(cad)[:n].tolist()
        actual_seq_lengths_q = cad.query_start_loc_cpu[1 : n + 1].tolist()
        return AttentionMeta(
            query_start_loc=torch.tensor([0, *actual_seq_lengths_q], dtype=torch.int32, device=device),
            seq_lens=torch.tensor(seq_lens_list, dtype=torch.int32, device=device),
            block_table=cad.block_table_tensor,
            slot_mapping=cad.slot_mapping,
            seq_len_bound=torch.tensor([max(seq_lens_list, default=0)], dtype=torch.int64),
        )


class DraftLogitsProcessor:
    """The draft's logits processor, as vLLM's draft classes hold one (``logits_processor``): the logits of
    an lm head and the draft's first output, and their gather over the TP group (``_gather_logits``), each
    by the checkout's ``AscendLogitsProcessor`` (``lmhead_tp``)."""

    def __init__(self, model):
        self.model = model

    def __call__(self, lm_head, hidden_states):
        """The logits of ``lm_head`` after the tiny model's head norm of the first output's view."""
        return lmhead_tp.compute_logits_over_tp(self.model.tiny, lm_head, self.model.logit_state(hidden_states))

    def _gather_logits(self, logits):
        return lmhead_tp.gather_logits(self.model.tiny, logits)


class AscendTinyMtp(VllmTinyMtp):
    """``TinyMtp`` as vllm-ascend's draft model: KV slots come with the attention metadata (int32 there).

    ``real``: (requests, first-pass tokens) of the current call, set by the adapter before a graph
    mode call: the rows of a replayed call's records that are the batch's (the rest is graph padding).
    """

    real: tuple[int, int] = (0, 0)
    on_forward = None  # data-parallel runs: told each forward's context and row count (``data_parallel``)

    def __init__(self, tiny, more_layers=()):
        super().__init__(tiny, more_layers)
        self.tp_head = None  # this rank's slice of the lm head (``lm_head``), made at first use
        self.logits_processor = DraftLogitsProcessor(self)
        self.call_slots: list[torch.Tensor] = []  # the KV slots each forward of the call was handed

    def compute_logits(self, hidden_states):
        """The draft's logits; under vllm-ascend's lm-head TP, or on TP ranks, through its own split
        of the lm head (``lmhead_tp``)."""
        if lmhead_tp.enabled() or lmhead_tp.over_tp():
            return self.logits_processor(self.lm_head, hidden_states)
        return self._tiny_logits(hidden_states)

    @early_reads.kernel
    def _tiny_logits(self, hidden_states):
        return super().compute_logits(hidden_states)

    @property
    def lm_head(self):
        """The draft's lm head as vllm-ascend's: the checkout's ``AscendParallelLMHead`` holding this rank's
        slice of the tiny lm head (``lmhead_tp.parallel_head``, made at first use). An EAGLE-3 drafter under
        ``enable_reduce_sample`` hands it to ``logits_processor`` itself (``compute_draft_token_ids``)."""
        if self.tp_head is None:
            self.tp_head = lmhead_tp.parallel_head(self.tiny)
        return self.tp_head

    def read(self, meta):
        """What a layer's kernels read: what vllm-ascend's builder built, as it is now."""
        return meta if isinstance(meta, RecordedMeta) else builders.read_back(meta)

    def slots(self, context, attn) -> torch.Tensor:
        slots = attn.slot_mapping.to(torch.int64)
        self.call_slots.append(slots)
        return slots

    def call_slots_written(self) -> frozenset[int]:
        """The KV slots the forwards since ``call_slots`` was emptied were handed (-1 aside)."""
        return frozenset(s for t in self.call_slots for s in t.tolist() if s >= 0)

    @early_reads.kernel  # the simulator's device work, and its records of what it read
    def forward(self, input_ids, positions, hidden_states=None, inputs_embeds=None, **kwargs):
        context = import_vllm("vllm.forward_context").get_forward_context()
        if self.on_forward is not None:
            self.on_forward(context, input_ids.shape[0])
        if context.attn_metadata is None:  # an eager dummy run: no metadata, so no attention and no KV write
            self.calls += 1
            out = torch.zeros(input_ids.shape[0], self.tiny.cfg.hidden_size, device=input_ids.device)
            return self.outputs(out)
        graph = fake_npu_graphs.capturing_graph()
        if graph is None:
            return super().forward(input_ids, positions, hidden_states, inputs_embeds, **kwargs)
        return self._captured_forward(graph, input_ids, positions, hidden_states)

    def _captured_forward(self, graph, input_ids, positions, hidden_states):
        """The forward inside a capture: lengths from the captured task, no host read; its record is
        tensors the replays rewrite, turned into a ``StepRecord`` after each replay."""
        context = import_vllm("vllm.forward_context").get_forward_context()
        attn = context.attn_metadata[LAYER]
        n = input_ids.shape[0]
        seq_lens, qsl, table, bound, rotation = tiny_attention.captured_reads(attn, n, LAYER)
        slots = rows_of_slots(self.slots(context, attn), n)[:n]
        live = {"input_ids": input_ids, "positions": positions, "seq_lens": seq_lens, "qsl": qsl, "slots": slots}
        live["table"], table = table, kernel_blocks.on_device(table)  # a hybrid target's kernel blocks: checked after
        if rotation is not None:  # MLA and SFA rotate by the captured cos/sin
            live["rope"] = mla.rope_positions(rotation.cos[:n], rotation.sin[:n])
            positions = rotated_positions(live["rope"], positions)
        out = self.tiny.forward(input_ids, positions, hidden_states, AttentionMeta(qsl, seq_lens, table, slots, bound))
        live["bound"] = bound
        live = {name: t.clone() for name, t in live.items()}  # copies the replay rewrites in place
        if not graph.after_replay:
            graph.after_replay.append(self._replayed_calls(graph))
        graph.records = [*getattr(graph, "records", []), live]
        return self.outputs(out)

    def _replayed_calls(self, graph):
        def replayed():
            for live in graph.records:
                if self.on_forward is not None:
                    context = import_vllm("vllm.forward_context").get_forward_context()
                    self.on_forward(context, live["input_ids"].shape[0])
                self.calls += 1
                kernel_blocks.check(live["table"], live["seq_lens"][: self.real[0]].tolist())
                self.call_slots.append(live["slots"].clone())
                if self.trace is not None:
                    self.trace.append(self._record(self.calls, live))

        return replayed

    def _record(self, call: int, live: dict) -> StepRecord:
        """A replayed call's record, the batch's rows and requests only (steps 2..K: one row per request)."""
        reqs, tokens = self.real
        if call == 1:
            return replayed_record(call, live, reqs, tokens, self.sample_indices)
        return replayed_record(call, live, reqs, reqs, torch.arange(reqs))


class AscendTinyDeepSeekMtp(AscendTinyMtp):
    """The MTP draft, with the predictor ``DeepSeekMTP`` holds (``.model``: its logits and their
    processor), which v0.22.1rc's reduced sampling asks for. vLLM's EAGLE drafts hold a ``LlamaModel``
    there, without either (``eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks``)."""

    @property
    def model(self):
        return SimpleNamespace(compute_logits=self.compute_logits, logits_processor=self.logits_processor)


def draft_model(tiny, more_layers=(), method: str = "mtp") -> AscendTinyMtp:
    """The tiny draft as vllm-ascend's drafter of ``method`` is handed it (``load_model``): an
    ``AscendTinyDeepSeekMtp`` for mtp; for eagle and eagle3 an ``AscendTinyMtp`` that is also vLLM's Llama
    EAGLE class (``vllm_model.draft_class``); for draft_model a plain ``AscendTinyMtp`` (the tiny model made a
    draft language model: ``TinyConfig.draft_model``)."""
    return draft_class(AscendTinyDeepSeekMtp if method == "mtp" else AscendTinyMtp, method, import_ascend)(
        tiny, more_layers
    )
