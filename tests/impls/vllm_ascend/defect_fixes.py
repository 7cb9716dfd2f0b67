"""vllm-ascend with a known defect fixed, as a pull request fixing it would: ``broken_gate.FIXES``.

A fix must end the gate with one line, ``fixed: ID no longer present; drop it from the list``, and
nothing else (docs/DESIGN.md, "Implementations under test and their divergences"); a half fix must
fail, naming the values that disagree. Each fix wraps vllm-ascend's own methods, so everything
else runs as the checkout has it (0.23.0's signatures or main's, bound by name):

- ``seq_lens_lowered``: ``padded-seq-lens-not-lowered``, as vllm-ascend #14883 describes it and as
  vLLM's ``EagleProposer.propose`` does: the first pass (merged step 0) keeps the unadjusted
  lengths; before the draft steps, a copy of the batch's ``seq_lens`` lowered by
  ``num_rejected_tokens_gpu`` is what steps 2..K advance from, device and host mirrors alike
  (``host=False``: the device tensor only, a half fix).
- ``computed_from_seq_lens``: ``num-computed-tokens-drift``: each step's ``num_computed_tokens_cpu``
  is its one-token query's context, ``seq_lens_cpu - 1``.
- ``advanced_once_per_group_step`` with ``layers_of_their_group``: ``draft-state-advanced-per-group``,
  as upstream's pull request #16793 describes its fix: the first draft attention group's update
  advances the step's state; each further group builds its metadata from that updated view, without
  advancing it again; and each group's layers are handed their group's metadata (``_propose``'s
  draft-step loop, one line of it edited). ``from_the_step_before`` builds the further groups' from
  the view before the step's update instead: a half fix, which must fail.
- ``unpadded-max-query-len``'s fix is the one vLLM and 0.13.0 share (``tests.impls.fixes``).
- ``predecessor_loads_masked``: ``rejection-kernels-read-before-their-buffer``, as vllm-ascend #14902
  and #16215 fix it: each rejection-sampling kernel loads the cumulative count before a request under
  a mask that excludes request 0 (``other=0``) instead of ``tl.where(i == 0, 0, tl.load(ptr + i - 1))``,
  which evaluates the load for request 0 too. The checkout's kernel file is recompiled with that edit
  and the sampler given its kernels (``use_edited_module``).

- ``cos_sin_of_each_draft_step``: ``mla-draft-cos-sin-shared`` as the SFA builder's fix (#10878) has its
  draft steps do: the MLA builder's ``build_for_drafting`` gathers each step's decode cos and sin afresh
  (``get_cos_and_sin_mla(..., use_cache=False)``), so no draft step writes the global buffer an earlier
  step's metadata holds (the first pass, built by ``build``, keeps its cached rows). A half fix: right
  eagerly, but a captured draft graph reads the tensors its capture was handed, and the dummy run
  captures every step on the global buffer (``build_for_graph_capture``), which the steps no longer
  write: under full graphs steps 2..K rotate at the first pass's first rows' positions.
- ``cos_sin_buffer_per_draft_step`` with ``capture_builds_each_draft_step``: the whole fix. Each draft
  step's decode cos and sin are gathered afresh and copied into a graph-stable buffer of that step's
  own (as #10878 gave SFA's lengths per-step buffers), and the dummy run captures steps 2..K through
  ``build_for_drafting`` (as its ``use_compress`` branch already does), so a capture holds those buffers.
- ``gather_through_the_drafts_own_processor``: ``eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks``:
  ``_run_merged_draft``'s reduce-sample branch for other methods gathers the logits through
  ``self.model.logits_processor`` (where vLLM's draft classes keep it), at the first pass and each step.
- ``runner_top_k_of_every_request``: ``reduce-sample-top-k-of-the-requests-under-a-slice``: the runner's
  ``_sample`` prepares its samplers with the batch's largest top-k, capped at the rank's columns.
- ``sfa_cos_sin_buffer_per_draft_step`` with ``capture_builds_each_draft_step``: ``sfa-graph-steps-replay-the-first-pass``
  fixed the same way on the SFA builder (its draft steps already gather afresh).
- ``block_table_aligned_with_the_requests``: ``draft-model-graph-block-table-of-padded-requests``: a draft
  model's slots laid out over as many block-table rows as it has requests (vllm-ascend #14714).
- ``grown_seq_lens_kept_in_full_graphs``: ``draft-model-graph-seq-lens-of-the-target``: ``_propose``'s
  FULL-graph branch keeps a draft model's grown lengths, as it keeps dflash's.
- ``query_starts_of_the_call_in_full_graphs``: ``draft-model-graph-query-starts-of-the-target`` (v0.22.1rc and
  before): ``_propose``'s FULL-graph branch pads the call's query starts, as 0.23.0's does, not the runner's.
- ``first_pass_slots_by_the_kernel_block``: ``draft-model-first-pass-slots-by-the-block-size``: the first pass
  takes the kernel block size over a hybrid target's kernel blocks, as the step update does (#12000).

``overflow-seq-len-restart`` has none (``broken_gate.NO_FIX``).
"""

from __future__ import annotations

import functools
import inspect
import re

import torch

from sim.impls.kit.ascend import runner_source
from sim.impls.vllm_ascend import generation
from tests.impls.fixes import edited, edited_everywhere, use_edited_module

KERNELS, SAMPLER = "vllm_ascend.ops.triton.reject_sample", "vllm_ascend.sample.rejection_sampler"
MLA = "vllm_ascend.attention.mla_v1"
# tl.where(i == 0, 0, tl.load(ptr + i - 1[, mask])): the predecessor load evaluated for i == 0 as well
PREDECESSOR_LOAD = r"tl\.where\((\w+) == 0, 0, tl\.load\((\w+) \+ \1 - 1(?:, (\w+))?\)\)"

_REJECTED = "_fix_num_rejected_tokens"  # the call's rejected counts, from _propose to its first step update


def _bound(original, self, args, kwargs) -> inspect.BoundArguments:
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    bound.apply_defaults()
    return bound


def keeps_rejected_counts(propose):
    """``_propose`` that leaves its ``num_rejected_tokens_gpu`` for the first step update."""

    @functools.wraps(propose)
    def wrapper(self, *args, **kwargs):
        setattr(self, _REJECTED, _bound(propose, self, args, kwargs).arguments.get("num_rejected_tokens_gpu"))
        try:
            return propose(self, *args, **kwargs)
        finally:
            setattr(self, _REJECTED, None)

    return wrapper


def seq_lens_lowered(host: bool = True):
    """``attn_update_stack_num_spec_norm`` whose first draft step starts from the lowered lengths."""

    def fix(update):
        @functools.wraps(update)
        def wrapper(self, *args, **kwargs):
            rejected = getattr(self, _REJECTED, None)
            if rejected is None:
                return update(self, *args, **kwargs)
            setattr(self, _REJECTED, None)  # once per call: the next groups and steps chain from this one
            bound = _bound(update, self, args, kwargs)
            cad = self.shallow_copy_metadata(bound.arguments["old_common_metadata"])
            n = rejected.shape[0]
            cad.seq_lens = cad.seq_lens.clone()
            cad.seq_lens[:n] -= rejected.to(cad.seq_lens.dtype)
            if host:
                on_host = rejected.cpu()
                for name in SEQ_LENS[1:]:
                    mirror = getattr(cad, name, None)
                    if mirror is not None:
                        mirror = mirror.clone()
                        mirror[:n] -= on_host.to(mirror.dtype)
                        setattr(cad, name, mirror)
            bound.arguments["old_common_metadata"] = cad
            return update(*bound.args, **bound.kwargs)

        return wrapper

    return fix


def computed_from_seq_lens(update):
    """``attn_update_stack_num_spec_norm`` that hands each step ``num_computed_tokens_cpu = seq_lens_cpu - 1``."""

    @functools.wraps(update)
    def wrapper(self, *args, **kwargs):
        cad, meta = update(self, *args, **kwargs)
        if cad.num_computed_tokens_cpu is not None and cad.seq_lens_cpu is not None:
            cad.num_computed_tokens_cpu = (cad.seq_lens_cpu - 1).to(cad.num_computed_tokens_cpu.dtype)
            bound = _bound(update, self, args, kwargs)
            builder = bound.arguments["attn_group"].get_metadata_builder()
            meta = generation.build_step(self, builder, cad, generation.draft_index(bound.arguments))
        return cad, meta

    return wrapper


SEQ_LENS = ("seq_lens", "seq_lens_cpu", "_seq_lens_cpu")  # the device lengths and their host mirrors


_STEP = "_fix_group_step"  # (draft index, the view before its update, the view after) of the step's first group


def advanced_once_per_group_step(from_the_step_before: bool = False):
    """``attn_update_stack_num_spec_norm`` that advances a draft step's state once, whatever the number of
    draft attention groups: a call chained on the view this step's first group returned builds its own
    group's metadata from that view (``from_the_step_before``: from the view before it, a half fix)."""

    def fix(update):
        @functools.wraps(update)
        def wrapper(self, *args, **kwargs):
            bound = _bound(update, self, args, kwargs)
            draft_index, old = generation.draft_index(bound.arguments), bound.arguments["old_common_metadata"]
            step = getattr(self, _STEP, None)
            if step is not None and step[0] == draft_index and old is step[2]:
                view = step[1] if from_the_step_before else old
                builder = bound.arguments["attn_group"].get_metadata_builder()
                return old, generation.build_step(self, builder, view, draft_index)
            cad, meta = update(self, *args, **kwargs)
            setattr(self, _STEP, (draft_index, old, cad))
            return cad, meta

        return wrapper

    return fix


# _propose's draft-step loop hands every draft layer the metadata of the group updated last; the fix hands
# each group's layers their own: the lines of each branch of the loop (one in 0.23.0 and main, with and
# without PCP in v0.22.1rc), whatever their indent. The first pass's and the dummy run's are not followed
# by an append to the steps' list.
_EVERY_LAYER = (
    r"for layer_name in self\.attn_layer_names:"
    r"(\n +per_layer_attn_metadata\[layer_name\] = attn_metadata\n +multi_steps_attn_metadata\.append\()"
)


def layers_of_their_group(propose):
    """``_propose`` whose draft steps hand each attention group's layers that group's metadata."""
    return edited_everywhere(propose, _EVERY_LAYER, r"for layer_name in attn_group.layer_names:\1")


_MAX_TOPK = "max_topk = self.input_batch.top_k_cpu[self.input_batch.top_k_cpu < logits.shape[1]].max()"


def runner_top_k_of_every_request(sample):
    """``_sample`` whose both branches (16 and 12 spaces in, the same in 0.23.0 and main) prepare the
    sampler with the largest top-k of the batch, capped at the rank's columns (recompiled from the
    checkout's source with that edit: ``sample`` is the method as compiled unchanged)."""
    capped = "max_topk = min(int(self.input_batch.top_k_cpu.max()), logits.shape[1])"
    edits = ((f"\n{' ' * n}{_MAX_TOPK}", f"\n{' ' * n}{capped}") for n in (16, 12))
    return runner_source.edited_runner_method(sample.__name__, *edits)


def top_k_over_the_candidates(apply_top_k_top_p_pytorch):
    """The sampler's torch path counting a request's top-k over the gathered candidates, not one rank's
    columns; only a top-k of all of them is no top-k (two lines, the same in 0.23.0 and main)."""
    return edited(
        apply_top_k_top_p_pytorch,
        (
            "kk = k.to(torch.long).clamp(min=1, max=V_local)",
            "kk = k.to(torch.long).clamp(min=1, max=probs_sort.size(1))",
        ),
        ("no_top_k_mask = (kk == V_local).unsqueeze(1)", "no_top_k_mask = (kk == probs_sort.size(1)).unsqueeze(1)"),
    )


_INNER_GATHER = "logits = self.model.model.logits_processor._gather_logits(logits)"


def gather_through_the_drafts_own_processor(run_merged_draft):
    """``_run_merged_draft`` gathering an EAGLE-1 draft's reduce-sample logits through its own logits
    processor: the first pass's line (20 spaces in) and the draft steps' (24), the same in 0.23.0 and main."""
    own = _INNER_GATHER.replace("self.model.model.", "self.model.")
    return edited(run_merged_draft, *((f"\n{' ' * n}{_INNER_GATHER}", f"\n{' ' * n}{own}") for n in (20, 24)))


def _masked_predecessor(match) -> str:
    index, ptr, mask = match.groups()
    guard = f"({index} > 0)" if mask is None else f"{mask} & ({index} > 0)"
    return f"tl.load({ptr} + {index} - 1, {guard}, other=0)"


def predecessor_loads_masked(monkeypatch) -> None:
    """The rejection sampler's kernels with every predecessor load masked off for request 0."""
    from sim.impls.kit.ascend.importing import import_ascend

    kernels, sampler = (import_ascend(m) for m in (KERNELS, SAMPLER))
    use_edited_module(monkeypatch, kernels, sampler, PREDECESSOR_LOAD, _masked_predecessor)


def cos_sin_of_each_draft_step(build_for_drafting):
    """The MLA builder's ``build_for_drafting`` whose decode cos and sin are gathered afresh (no cache)."""
    from sim.impls.kit.ascend.importing import import_ascend

    @functools.wraps(build_for_drafting)
    def wrapper(self, *args, **kwargs):
        module = import_ascend(MLA)
        cached = module.get_cos_and_sin_mla
        module.get_cos_and_sin_mla = lambda positions, use_cache=False: cached(positions)
        try:
            return build_for_drafting(self, *args, **kwargs)
        finally:
            module.get_cos_and_sin_mla = cached

    return wrapper


def _cos_sin_into_step_buffers(builder, rotation, draft_index: int) -> None:
    """``rotation``'s cos and sin (a metadata part holding them) copied into buffers draft step
    ``draft_index`` of ``builder`` owns (shaped as the global one), written in place at every build."""
    from sim.impls.kit.ascend.importing import import_ascend

    rotary = import_ascend("vllm_ascend.ops.rotary_embedding")
    buffers = builder.__dict__.setdefault("_fix_draft_cos_sin", {})
    if draft_index not in buffers:  # allocated as the builder's own buffers are, outside inference mode
        with torch.inference_mode(False):
            buffers[draft_index] = (torch.empty_like(rotary._cos_mla), torch.empty_like(rotary._sin_mla))
    n = rotation.cos.shape[0]
    for name, buffer in zip(("cos", "sin"), buffers[draft_index]):
        buffer[:n].copy_(getattr(rotation, name))
        setattr(rotation, name, buffer[:n])


def cos_sin_buffer_per_draft_step(build_for_drafting):
    """The MLA builder's ``build_for_drafting`` whose decode cos and sin are gathered afresh into a
    buffer each draft step owns (shaped as the global one), written in place at every build."""
    fresh = cos_sin_of_each_draft_step(build_for_drafting)

    @functools.wraps(build_for_drafting)
    def wrapper(self, common_attn_metadata, draft_index, *args, **kwargs):
        meta = fresh(self, common_attn_metadata, draft_index, *args, **kwargs)
        if meta.decode is not None:
            _cos_sin_into_step_buffers(self, meta.decode, draft_index)
        return meta

    return wrapper


def sfa_cos_sin_buffer_per_draft_step(build_for_drafting):
    """The SFA builder's ``build_for_drafting`` whose cos and sin (gathered afresh, as the checkout's
    are) land in a buffer each draft step owns, written in place at every build."""

    @functools.wraps(build_for_drafting)
    def wrapper(self, common_attn_metadata, draft_index, *args, **kwargs):
        meta = build_for_drafting(self, common_attn_metadata, draft_index, *args, **kwargs)
        _cos_sin_into_step_buffers(self, meta, draft_index)
        return meta

    return wrapper


# The dummy run builds every step's capture metadata with build_for_graph_capture, unless the drafter
# compresses its KV (0.23.0 and main; v0.21.0rc and v0.22.1rc have no such branch); the fix builds steps
# 2..K with build_for_drafting always.
_CAPTURE_STEPS = "if not self.use_compress or draft_index == 0:"
_CAPTURE_BUILD = "attn_metadata_eagle = builder.build_for_graph_capture("


def capture_builds_each_draft_step(dummy_run):
    """``dummy_run`` whose capture builds steps 2..K's metadata with ``build_for_drafting``."""
    dummy_run = inspect.unwrap(dummy_run)
    source = inspect.getsource(dummy_run)
    if _CAPTURE_STEPS in source:
        return edited(dummy_run, (_CAPTURE_STEPS, "if draft_index == 0:"))
    step = re.search(r"for (\w+) in range\(self\.num_speculative_tokens\):", source).group(1)  # v0.18.0: draft_step
    drafting = f"attn_metadata_eagle = builder.build_for_drafting(common_attn_metadata, {step}) if {step} else "
    return edited(dummy_run, (_CAPTURE_BUILD, _CAPTURE_BUILD.replace("attn_metadata_eagle = ", drafting)))


def block_table_aligned_with_the_requests(set_inputs_first_pass):
    """``set_inputs_first_pass`` laying a draft model's slots out over as many block-table rows as it has
    requests (its ``query_start_loc``): vllm-ascend #14714's ``align_block_table_for_slot_mapping``."""

    @functools.wraps(set_inputs_first_pass)
    def wrapper(self, *args, **kwargs):
        cad = _bound(set_inputs_first_pass, self, args, kwargs).arguments["cad"]
        if self.needs_extra_input_slots:
            cad.block_table_tensor = cad.block_table_tensor[: cad.query_start_loc.shape[0] - 1]
        return set_inputs_first_pass(self, *args, **kwargs)

    return wrapper


def first_pass_slots_by_the_kernel_block(set_inputs_first_pass):
    """``set_inputs_first_pass`` looking a draft model's slots up by the kernel block size where the drafter found
    linear-attention layers (``has_gdn``), as its step update does."""
    return edited(
        set_inputs_first_pass,
        (
            "block_size = self.draft_attn_groups[0].kv_cache_spec.block_size",
            "block_size = self.kernel_block_size if self.has_gdn else self.draft_attn_groups[0].kv_cache_spec.block_size",
        ),
    )


def grown_seq_lens_kept_in_full_graphs(propose):
    """``_propose`` whose FULL-graph branch pads the lengths a draft model's first pass grew, device and host,
    to the graph's requests, in place of the target's (the runner's)."""
    grown = "common_attn_metadata.{} if self.needs_extra_input_slots else self.runner.{}"
    return edited(
        propose,
        ("self._adjust_tensor(self.runner.seq_lens,", f"self._adjust_tensor({grown.format('seq_lens', 'seq_lens')},"),
        (
            "self.runner.optimistic_seq_lens_cpu, num_reqs_padded",
            f"{grown.format('seq_lens_cpu', 'optimistic_seq_lens_cpu')}, num_reqs_padded",
        ),
    )


def query_starts_of_the_call_in_full_graphs(propose):
    """``_propose`` whose FULL-graph branch pads the call's query starts (a draft model's grown ones): copied into
    the runner's buffer that the branch pads and hands on, as 0.23.0 copies them into a buffer of its own."""
    call = "common_attn_metadata.query_start_loc"
    copied = (
        f"self.runner.query_start_loc.gpu[: {call}.shape[0]].copy_({call}); "
        f"self.runner.query_start_loc.cpu[: {call}.shape[0]].copy_({call}_cpu); "
    )
    padded = "num_reqs_padded = self.runner._pad_query_start_loc_for_fia(\n"
    return edited(propose, (padded, copied + padded))
