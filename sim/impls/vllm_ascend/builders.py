"""vllm-ascend's own attention metadata builder builds the draft's metadata; the tiny attention reads what it built.

The draft layer's backend (``model.TinyAttentionBackend``) hands ``initialize_attn_backend`` the
checkout's ``AscendAttentionMetadataBuilder`` (``vllm_ascend/attention/attention_v1.py``, the GQA
builder every non-MLA draft gets), subclassed only to record (``recording``): each build checks
the common metadata's host mirrors, as the recording group does (not a dummy run's, whose metadata
is a placeholder: v0.22.1rc hands a capture the per-step device buffers unfilled; what a replay
reads is compared), and keeps, with the metadata the real builder returns, the views it
holds and their values at build (``metadata_checks.Built``): the
real metadata's own tensors and host lists, and the common metadata's tensors a backend keeps views
of. Nothing of the real build is replaced. The forward reads the real metadata as it is then
(``read_back``): the kernels' host lists (``seq_lens_list``, ``actual_seq_lengths_q``), its block
table and slots, so a builder that hands a later step's values in an earlier step's buffers or
lists fails, at the forward, by name (``check_unchanged``) and against the reference. It reads the
``attn_state`` as the FIA kernels' ``_get_fia_params`` does: in ``PrefillNoCache`` no cached
context is read, each request's rows attend to its rows of this forward alone
(``AttentionMeta.own_rows_only``); that state on a forward whose requests have context before their
rows fails by name (``metadata_checks.check_no_context``), and the drafts show it too.

One stand-in, for plumbing: the build's pinned host copies are plain ones on the simulator
(``sim.impls.kit.ascend.host_memory``). The kernels (``npu_fused_infer_attention_score``) are
the tiny attention's, reading exactly those fields.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from devices.sim import early_reads
from sim.impls.kit.ascend import interop, kernel_blocks, mla, sfa
from sim.impls.kit.ascend.host_memory import unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.metadata_checks import COMPUTED, Built, RecordedMeta, check_mirrors
from sim.impls.kit.vllm_model import held_views

_HELD = ("block_tables", "slot_mapping", "seq_lens", "query_start_loc", "seq_lens_list", "actual_seq_lengths_q")


@functools.cache
def recording(real_cls: type) -> type:
    """``real_cls`` (a vllm-ascend metadata builder) recording what each build hands attention."""

    class Recording(real_cls):
        _step: int | None = 1  # the first pass's build; build_for_drafting says its step
        _building = False  # inside a recorded build (GQA's and MLA's build_for_drafting call build, SFA's not)

        def build_for_drafting(self, common_attn_metadata, draft_index, *args, **kwargs):
            self._step = draft_index + 1
            try:
                build = super().build_for_drafting
                return self._recorded(build, common_attn_metadata, common_attn_metadata, draft_index, *args, **kwargs)
            finally:
                self._step = 1

        def build_for_graph_capture(self, common_attn_metadata, *args, **kwargs):
            self._step = None  # a dummy run's: no step of a call
            try:
                return super().build_for_graph_capture(common_attn_metadata, *args, **kwargs)
            finally:
                self._step = 1

        def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
            build = super().build
            return self._recorded(build, common_attn_metadata, common_prefix_len, common_attn_metadata, *args, **kwargs)

        def _recorded(self, build, cad, *args, **kwargs):
            """``build(*args, **kwargs)``'s metadata of ``cad``, its mirrors checked first and its views kept."""
            if self._building:
                return build(*args, **kwargs)
            step = None if self._step is None else _told[0] or self._step  # a capture's is no step's
            # a dummy run's metadata is a placeholder (a capture's, however built); a replay's reads are compared
            if step is not None and not _dummy[0]:
                with early_reads.unfollowed():  # the harness's check, not device work
                    check_mirrors(cad, step)
            self._building = True
            try:
                with unpinned_host_memory():
                    meta = build(*args, **kwargs)
            finally:
                self._building = False
            with early_reads.unfollowed():  # the harness's record, not device work
                meta.recorded = Built(step, {**held_views(cad), **_held(meta)})
            return meta

    Recording.__name__ = Recording.__qualname__ = f"Recording{real_cls.__name__}"
    return Recording


_dummy = [False]  # inside a dummy run (``for_a_dummy_batch``)
_told = [None]  # the draft step being built, where the build is not told it (``building_step``)


@contextlib.contextmanager
def building_step(step: int):
    """The builds inside are draft step ``step``'s (v0.21.0rc builds its steps through ``build``, as a
    first pass: ``generation.tell_builders_the_step``)."""
    _told[0] = step
    try:
        yield
    finally:
        _told[0] = None


@contextlib.contextmanager
def for_a_dummy_batch():
    """The builds inside are a dummy run's: placeholder metadata, its host mirrors not checked (v0.22.1rc
    hands a capture the per-step device buffers unfilled, whichever build it takes)."""
    _dummy[0] = True
    try:
        yield
    finally:
        _dummy[0] = False


def _held(meta) -> dict:
    """What the metadata's kernels keep views of until the forward: its own tensors and host lists."""
    if mla.is_mla(meta):
        return mla.held(meta)
    if sfa.is_sfa(meta):
        return sfa.held(meta)
    return {f"metadata.{name}": getattr(meta, name) for name in _HELD}


def attention_builder() -> type:
    """The checkout's GQA builder, recording."""
    return recording(import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionMetadataBuilder)


def mla_builder() -> type:
    """The checkout's MLA builder (``mla_v1.AscendMLAMetadataBuilder``), recording."""
    return recording(import_ascend("vllm_ascend.attention.mla_v1").AscendMLAMetadataBuilder)


def sfa_builder() -> type:
    """The checkout's SFA builder (``sfa_v1.AscendSFAMetadataBuilder``), recording."""
    return recording(import_ascend("vllm_ascend.attention.sfa_v1").AscendSFAMetadataBuilder)


def read_back(meta) -> RecordedMeta:
    """What the kernels read of real metadata now: MLA's (``mla.read_back``), SFA's (``sfa.read_back``),
    or ``AscendMetadata``'s: the host lists, the table, the slots, and whether cached context is read at
    all (the attention state)."""
    if mla.is_mla(meta):
        return mla.read_back(meta)
    if sfa.is_sfa(meta):
        return sfa.read_back(meta)
    built = meta.recorded
    lens, qsl = list(meta.seq_lens_list), [0, *meta.actual_seq_lengths_q]
    device = meta.block_tables.device
    own_rows_only = interop.reads_no_cached_context(meta.attn_state)
    return RecordedMeta(
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
        block_table=kernel_blocks.fold(meta.block_tables, lens),  # a hybrid target's kernel blocks: the blocks read
        slot_mapping=meta.slot_mapping,
        seq_len_bound=torch.tensor([max(lens, default=0)], dtype=torch.int64),
        built=built,
        num_computed_tokens=built.views.get(COMPUTED),
        own_rows_only=own_rows_only,
    )
