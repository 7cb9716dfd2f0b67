"""The simulator's tiny MTP layer as vLLM's draft model, and an attention group that records.

vLLM's ``propose`` hands the model only ids, positions and hidden states; the
attention metadata travels through its forward context, built per step by
each attention group's ``build_metadata_for_drafting``. ``SnapshotAttnGroup``
builds the core's ``AttentionMeta`` from vLLM's ``CommonAttentionMetadata``
the way a backend does: views of its tensors (the object itself is edited
between steps, its tensors must not be), after checking its host mirrors
(``metadata_checks.check_mirrors``), with a copy of what it holds taken at
build. ``VllmTinyMtp`` reads it back from the forward context, checks nothing
it holds changed since the build (``metadata_checks.check_unchanged``), runs
``TinyMtp`` on the paged cache and records a ``StepRecord`` per call, so the
simulator's comparisons see exactly what the model was fed when it ran.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from mtp.model import AttentionMeta
from mtp.trace import StepRecord
from sim.impls.kit.metadata_checks import (
    COMPUTED,
    MIRRORS,
    Built,
    RecordedMeta,
    check_mirrors,
    check_no_context,
    check_same_step,
    check_unchanged,
    present,
)
from sim.impls.kit.vllm_types import import_vllm

LAYER = "mtp.attn"
INDEXER_LAYER = "mtp.indexer.k_cache"  # a second draft layer, of a second backend (a sparse indexer's key cache)


def held_views(cad) -> dict[str, torch.Tensor]:
    """The tensors of ``cad`` a backend keeps views of until the forward: device and host, live rows."""
    n = cad.num_reqs
    views = {
        "query_start_loc": cad.query_start_loc[: n + 1],
        "seq_lens": cad.seq_lens[:n],
        "block_table": cad.block_table_tensor,
        "slot_mapping": cad.slot_mapping,
    }
    for host, extra in [(host, extra) for host, _, extra in MIRRORS] + [(COMPUTED, 0)]:
        value = present(cad, host)
        if value is not None:
            views[host] = value[: n + extra]
    return views


class SnapshotAttnGroup:
    """Duck-types vLLM's ``AttentionGroup`` for ``propose``: ``layer_names`` and
    ``build_metadata_for_drafting(common_attn_metadata=, draft_index=)``."""

    layer_names = [LAYER]

    def __init__(self):
        self.sample_indices: torch.Tensor | None = None

    def build_metadata_for_drafting(self, common_attn_metadata, draft_index: int | None) -> RecordedMeta:
        """Step ``draft_index + 1``'s metadata (None: a builder that is not told the step), its host
        mirrors checked, holding views of ``common_attn_metadata``'s tensors and their values at build."""
        cad = common_attn_metadata
        step = None if draft_index is None else draft_index + 1
        check_mirrors(cad, step)
        meta = self.attention_meta(cad)
        held = held_views(cad)
        return RecordedMeta(**vars(meta), built=Built(step, held), num_computed_tokens=held.get(COMPUTED))

    def attention_meta(self, cad) -> AttentionMeta:
        """What the attention reads: vLLM's backends read the device tensors (views, not copies)."""
        return AttentionMeta(
            query_start_loc=cad.query_start_loc[: cad.num_reqs + 1],
            seq_lens=cad.seq_lens[: cad.num_reqs],
            block_table=cad.block_table_tensor,
            slot_mapping=cad.slot_mapping,
            seq_len_bound=torch.tensor([self.seq_len_bound(cad)], dtype=torch.int64),
        )

    def seq_len_bound(self, cad) -> int:
        """The host-side bound of ``seq_lens`` the attention is given (vLLM: ``max_seq_len``)."""
        return cad.max_seq_len


def step_record(
    call, bound, attn, input_ids, positions, slots, rows, sample_indices, num_computed=None, rope_positions=None
) -> StepRecord:
    """One forward's ``StepRecord``: the rows up to ``query_start_loc[-1]``, the slots past them up to
    ``rows`` as padding; the first call samples ``sample_indices``, a later one one row per request."""
    real = int(attn.query_start_loc[-1])
    sample = sample_indices if call == 1 else torch.arange(attn.seq_lens.shape[0])
    return StepRecord.capture(
        call,
        bound,
        rows,
        input_ids=input_ids[:real],
        positions=positions[:real],
        seq_lens=attn.seq_lens,
        slot_mapping=slots[:real],
        query_start_loc=attn.query_start_loc,
        sample_indices=sample,
        padding_slots=slots[real:rows],
        num_computed_tokens=num_computed,
        rope_positions=None if rope_positions is None else rope_positions[:real],
    )


def replayed_record(call: int, live: dict, reqs: int, real: int, sample_indices: torch.Tensor) -> StepRecord:
    """A model call replayed from a captured graph, as a record: ``live``, the tensors each replay rewrites (its
    ``input_ids``, ``positions``, ``seq_lens``, ``qsl``, ``slots``, ``bound``, an MLA or SFA layer's ``rope``), cut
    to the batch's ``real`` rows (a first pass's tokens, a step's requests) and ``reqs`` requests."""
    rows = live["input_ids"].shape[0]
    return StepRecord.capture(
        call,
        int(live["bound"][0]),
        rows,
        input_ids=live["input_ids"][:real],
        positions=live["positions"][:real],
        seq_lens=live["seq_lens"][:reqs],
        slot_mapping=live["slots"][:real],
        query_start_loc=live["qsl"][: reqs + 1],
        sample_indices=sample_indices,
        padding_slots=live["slots"][real:rows],
        rope_positions=live["rope"][:real] if "rope" in live else None,
    )


def rotated_positions(rope: torch.Tensor | None, positions: torch.Tensor) -> torch.Tensor:
    """The positions the model rotates each row at: ``rope``, those the metadata carries (MLA's), the
    model's own past them (padding rows) or where it carries none (None)."""
    if rope is None:
        return positions
    rope = rope.to(positions.device, positions.dtype)[: positions.shape[0]]
    return torch.cat([rope, positions[rope.shape[0] :]])


def rows_of_slots(slots: torch.Tensor, rows: int) -> torch.Tensor:
    """``slots`` for a forward of ``rows`` rows: longer is kept (the rows past ``rows`` are the record's
    padding), shorter is -1 past its end (a builder that slices them to its ``num_actual_tokens``: the
    kernel writes those rows only)."""
    if slots.shape[0] >= rows:
        return slots
    return torch.cat([slots, slots.new_full((rows - slots.shape[0],), -1)])


def with_padding_rows(attn: AttentionMeta, slots: torch.Tensor, rows: int) -> AttentionMeta:
    """``attn`` over ``rows`` rows: rows past ``query_start_loc[-1]`` form one more request that sees
    nothing (seq_len 0, no blocks), as padding rows are inert in an attention kernel given the real lengths."""
    real, own = int(attn.query_start_loc[-1]), attn.own_rows_only
    if rows <= real:
        return AttentionMeta(
            attn.query_start_loc, attn.seq_lens, attn.block_table, slots, attn.seq_len_bound, own_rows_only=own
        )
    qsl = torch.cat([attn.query_start_loc, attn.query_start_loc.new_tensor([rows])])
    seq_lens = torch.cat([attn.seq_lens, attn.seq_lens.new_zeros(1)])
    table = torch.cat([attn.block_table, torch.full_like(attn.block_table[:1], -1)])
    return AttentionMeta(qsl, seq_lens, table, slots, attn.seq_len_bound, own_rows_only=own)


def logit_view(hidden: torch.Tensor) -> torch.Tensor:
    """The hidden state as the draft model's first output carries it: features reversed (an involution).

    DeepSeek's MTP model returns two states, one to compute logits from and one to feed back into the
    next step (``(logit_hidden, recycle_hidden)``, vLLM's ``model_returns_tuple``). The tiny model's
    logits and fed-back state are one tensor; returning it twice would make a proposer that swaps
    them draft the same tokens. Carried reversed in the first output and reversed back by
    ``compute_logits``, the two differ in value while the drafts of a proposer that uses each for
    what it is stay exactly the core's; one that feeds back the first, or computes logits from the
    second, drafts other tokens.
    """
    return hidden.flip(-1)


class VllmTinyMtp(nn.Module):
    """``TinyMtp`` behind vLLM's draft-model interface: ``DeepSeekMTPModel``'s tuple of the state logits are
    computed from and the state fed back, which differ in value (``logit_view``).

    ``returns_tuple``: set False for a proposer whose ``model_returns_tuple()`` says its draft model
    returns one state (vllm-ascend v0.21.0rc and v0.22.1rc, on vLLM 0.21/0.22, for ``mtp``): that state
    is then what logits are computed from and what is fed back, as it is."""

    returns_tuple = True

    def __init__(self, tiny, more_layers=()):
        """``more_layers``: the draft's layers besides ``LAYER``, each with a paged cache of its own holding what
        the model's holds (``PagedKvCache.clone``); the heads are split over all of them (``TinyMtp.forward_layers``)."""
        nn.Module.__init__(self)  # not super(): a subclass may also be a vLLM model class (``draft_class``)
        self.tiny = tiny
        self.more_layers = [(name, tiny.cache.clone()) for name in more_layers]
        self.trace: list[StepRecord] | None = None
        self.sample_indices: torch.Tensor | None = None  # first pass: set by the adapter
        self.calls = 0

    def forward(self, input_ids, positions, hidden_states=None, inputs_embeds=None, **_):
        context = import_vllm("vllm.forward_context").get_forward_context()
        attn = self.attention(context)
        if isinstance(attn, RecordedMeta) and attn.built is not None:
            check_unchanged(attn.built, self.calls + 1)
        check_no_context(self.calls + 1, attn)
        n = input_ids.shape[0]
        slots = rows_of_slots(self.slots(context, attn), n)  # what the KV write is told
        # rows past query_start_loc[-1] are padding (vllm-ascend runs MTP steps at the first pass's row
        # count); vLLM never pads here
        meta = with_padding_rows(attn, slots[:n], n)
        recorded = isinstance(attn, RecordedMeta)
        computed, rope = (attn.num_computed_tokens, attn.rope_positions) if recorded else (None, None)
        out = self.run(context, input_ids, rotated_positions(rope, positions), hidden_states, meta)
        self.calls += 1
        if self.trace is not None:
            bound = int(attn.seq_len_bound[0])
            self.trace.append(
                step_record(
                    self.calls, bound, attn, input_ids, positions, slots, n, self.sample_indices, computed, rope
                )
            )
        return self.outputs(out)

    def outputs(self, out: torch.Tensor):
        """What the forward returns for its state ``out``: the two states, or ``out`` (``returns_tuple``)."""
        return (logit_view(out), out) if self.returns_tuple else out

    def logit_state(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The state logits are computed from, out of the forward's first output (``outputs``)."""
        return logit_view(hidden_states) if self.returns_tuple else hidden_states

    def run(self, context, input_ids, positions, hidden_states, meta: AttentionMeta) -> torch.Tensor:
        """The tiny model's forward with ``meta``, its layer's attention; with more layers, each layer's metadata
        as its forward reads it, checked unchanged since its build (where recorded) and against ``LAYER``'s
        (``check_same_step``), then the heads split over the layers."""
        if not self.more_layers:
            return self.tiny.forward(input_ids, positions, hidden_states, meta)
        n, step = input_ids.shape[0], self.calls + 1
        layers = [(self.tiny.cache, meta)]
        for name, cache in self.more_layers:
            attn = self.read(context.attn_metadata[name])
            if isinstance(attn, RecordedMeta) and attn.built is not None:
                check_unchanged(attn.built, step)
            attn = with_padding_rows(attn, rows_of_slots(self.slots(context, attn), n)[:n], n)
            check_same_step(step, name, attn, LAYER, meta)
            layers.append((cache, attn))
        return self.tiny.forward_layers(input_ids, positions, hidden_states, layers)

    def attention(self, context) -> AttentionMeta:
        """What this forward's attention reads: the metadata its layer was handed, as its kernels read it (``read``)."""
        return self.read(context.attn_metadata[LAYER])

    def read(self, meta) -> AttentionMeta:
        """What a layer's kernels read of the metadata it was handed (the core's type here: vLLM's adapters')."""
        return meta

    def slots(self, context, attn: AttentionMeta) -> torch.Tensor:
        """The KV slots of this forward (vLLM keeps them in the forward context, per layer)."""
        return context.slot_mapping[LAYER]

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.tiny.compute_logits(self.logit_state(hidden_states))

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """eagle3: the target's three layers folded (the tiny draft's own; it refuses if not an eagle3 draft)."""
        return self.tiny.combine_hidden_states(hidden_states)


DRAFT_CLASSES = {  # the method -> the class vLLM builds for a Llama EAGLE draft of it (module, class)
    "eagle": ("vllm.model_executor.models.llama_eagle", "EagleLlamaForCausalLM"),
    "eagle3": ("vllm.model_executor.models.llama_eagle3", "Eagle3LlamaForCausalLM"),
}


def draft_class(model_cls: type, method: str, importer) -> type:
    """``model_cls`` (a tiny draft behind vLLM's interface) as the draft class vLLM builds for ``method``
    (``DRAFT_CLASSES``, imported by ``importer``; mtp: ``model_cls`` itself): vLLM's and vllm-ascend's
    ``propose`` assert that an eagle3 draft is one of their EAGLE-3 classes before they fold the target's
    auxiliary hidden states with its ``combine_hidden_states``, and a drafter may take paths by the
    class. The class is vLLM's by inheritance only: nothing of it is built (no weights), every method
    the drafter calls is the tiny model's, so a method or attribute of vLLM's class that a drafter
    reached would fail on what it reads (as on a draft vLLM built, whose parts are other than the
    drafter assumed)."""
    if method not in DRAFT_CLASSES:
        return model_cls
    module, name = DRAFT_CLASSES[method]
    return _subclass(model_cls, getattr(importer(module), name))


@functools.cache
def _subclass(model_cls: type, vllm_cls: type) -> type:
    return type(f"{model_cls.__name__}As{vllm_cls.__name__}", (model_cls, vllm_cls), {})


def target_layers(hidden: torch.Tensor, eagle3: bool) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """The target's hidden states as its forward returns them to the runner: its last layer's, and for an
    EAGLE-3 drafter its three auxiliary layers apart (the batch holds the three side by side, the last
    layer last), which the runner or the drafter concatenates again."""
    if not eagle3:
        return hidden, None
    aux = list(hidden.chunk(3, dim=-1))
    return aux[-1], aux
