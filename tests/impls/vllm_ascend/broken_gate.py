"""A broken vllm-ascend under the whole gate: ``-p tests.impls.vllm_ascend.broken_gate`` with
``MTP_BROKEN_VLLM_ASCEND=NAME`` applies the break ``NAME`` for the session (and in every xdist
worker), as a pull request carrying that regression would. ``benchmarks/time_to_failure.py
--impl vllm_ascend`` runs the gate once per variant and times its first failure.
"""

from __future__ import annotations

import pytest

from tests.impls import fixes as shared
from tests.impls.broken_kernels import FirstLapOnly
from tests.impls.vllm_ascend import defect_fixes as fixes
from tests.impls.vllm_ascend import dp_breaks as dp
from tests.impls.vllm_ascend import graph_breaks as graph
from tests.impls.vllm_ascend import handoff_breaks as handoff
from tests.impls.vllm_ascend import metadata_breaks as meta
from tests.impls.vllm_ascend import method_breaks as method
from tests.impls.vllm_ascend import mla_breaks as mla
from tests.impls.vllm_ascend import rejection_breaks as reject
from tests.impls.vllm_ascend import sampling_breaks as sampling
from tests.impls.vllm_ascend import sfa_breaks as sfa
from tests.impls.vllm_ascend import tp_breaks as tp

ENV = "MTP_BROKEN_VLLM_ASCEND"
UPDATE = "attn_update_stack_num_spec_norm"
DISPATCH = "CudagraphDispatcher.dispatch"  # vLLM's, as the runner's dispatcher
POSITIONS = "GPUModelRunner._get_positions"  # vLLM's, which vllm-ascend's runner inherits
INPUT_IDS = "GPUModelRunner._prepare_input_ids"  # vLLM's, which it inherits: the next step's, under async scheduling
HANDOFF = "NPUModelRunner.propose_draft_token_ids"  # the runner's, as its execute_model calls it
ATTN_STATE = "NPUModelRunner._build_attn_state"  # the runner's, as its input preparation calls it
DP_SYNC = "NPUModelRunner._sync_metadata_across_dp"  # the runner's, as the drafter calls it
COUNT_COPY = "NPUModelRunner._copy_valid_sampled_token_count"  # the runner's, under async scheduling
CORRECTION = "NPUModelRunner._correct_optimistic_seq_lens_cpu"  # the runner's next step, under async scheduling
SPEC_METADATA = "NPUModelRunner._calc_spec_decode_metadata"  # the runner's, where it samples (runner_samples)
BOOKKEEPING = "NPUModelRunner._bookkeeping_sync"  # the runner's, where it samples (runner_samples)
CUDA_WRAPPER = "_torch_cuda_wrapper"  # the runner module's, as its __init__ leaves torch.cuda (torch_cuda)
UNPADDED = "AscendCommonAttentionMetadata.unpadded"  # the checkout's, as the runner hands a padded step's on
BUILDER = "AscendAttentionMetadataBuilder.build"  # the checkout's attention builder, the draft layer's
MLA_BUILDER = "AscendMLAMetadataBuilder."  # a method of the checkout's MLA builder, an MLA draft layer's
SFA_BUILDER = "AscendSFAMetadataBuilder."  # a method of the checkout's SFA builder, an SFA draft layer's
BUILDER_MODULES = {MLA_BUILDER: "vllm_ascend.attention.mla_v1", SFA_BUILDER: "vllm_ascend.attention.sfa_v1"}
REJECT_KERNELS = "vllm_ascend.ops.triton.reject_sample"  # the rejection sampler's kernels, a whole module
LMHEAD_CHECK = "lmhead_tp_enable"  # the drafter's check of lm-head TP (llm_base_proposer's name for it)
LMHEAD_LOGITS = "AscendLogitsProcessor._get_logits_lmheadtp"  # the lm head's logits under lm-head TP
LOGITS_GATHER = "AscendLogitsProcessor._gather_logits"  # the lm head's logits gathered over the TP group
GREEDY_SAMPLE = "greedy_sample"  # the drafter's reduce-sample greedy over TP ranks (llm_base_proposer's)
VERIFY_GREEDY = "rejection_sampler.greedy_sample"  # the rejection sampler's reduce-sample greedy of the target
VERIFY_CANDIDATES = "rejection_sampler.apply_top_k_top_p"  # its reduce-sample candidates of random requests
DRAFT_CONTEXT = "set_ascend_forward_context"  # the forward context a drafter opens (llm_base_proposer's name)
DEVICE_CORRECTION = "update_num_computed_tokens_for_batch_change"  # vllm_ascend.spec_decode.utils', async
REJECT_SAMPLE = "rejection_sample"  # the rejection sampler's function (vllm_ascend.sample.rejection_sampler)
RUNNER_SAMPLE = "NPUModelRunner._sample"  # the runner's, preparing its samplers (sim.impls.vllm_ascend.rejection)
TORCH_TOP_K = "sampler._apply_top_k_top_p_pytorch"  # the sampler's torch path (device_paths: devices but A2/A3)
BALANCE = "BalanceScheduler.schedule"  # the checkout's balance scheduler (sim.impls.kit.ascend.schedulers)
KERNEL_BLOCKS = "BlockTable._convert_physical_to_logical_blocks"  # the runner's (a hybrid target's kernel blocks)

# name -> (the proposer's method, the break), or (None, a kernel break) for the spec-decode kernel.
VARIANTS = {
    "slot-plus-one": (UPDATE, method.slot_plus_one),
    "kernel-blocks-indexed-by-the-block-size": (UPDATE, method.kernel_blocks_indexed_by_the_block_size),
    "kernel-blocks-of-the-next-block": (KERNEL_BLOCKS, handoff.kernel_blocks_of_the_next_block),
    "sample-row-off-by-one": ("prepare_inputs_padded", method.sample_row_off_by_one),
    "first-valid-token": ("prepare_next_token_ids_padded", method.first_valid_token),
    "device-sync-in-padded-path": ("prepare_inputs_padded", method.reads_rejected_counts_back),
    "kernel-first-lap-only": (None, FirstLapOnly),
    "seq-lens-cpu-not-advanced": (UPDATE, meta.host_mirror_not_advanced("seq_lens_cpu")),
    "upstream-host-lengths-not-advanced": (UPDATE, meta.host_mirror_not_advanced("_seq_lens_cpu")),
    "query-start-loc-cpu-not-advanced": (UPDATE, meta.host_mirror_not_advanced("query_start_loc_cpu")),
    "computed-as-seq-lens": ("prepare_inputs_padded", meta.computed_as_seq_lens),
    "step-slots-of-a-32k-table": (UPDATE, meta.step_slots_of_a_32k_table),
    "seq-lens-written-into-the-step-before": (UPDATE, meta.written_into_the_step_before("seq_lens")),
    "model-outputs-swapped": ("maybe_all_gather_and_unpad", method.outputs_swapped),
    "draft-model-host-lengths-not-grown": ("set_inputs_first_pass", method.draft_model_host_lengths_not_grown),
    "host-mirror-read-before-its-copy-lands": (
        "prepare_inputs_padded",
        method.host_mirror_read_before_its_copy_lands(),
    ),
    "full-graph-params-not-updated": ("_update_full_graph_params", graph.params_not_updated),
    "full-graph-params-of-the-first-step": ("_update_full_graph_params", graph.params_of_the_first_step),
    "capture-sizes-reversed": (DISPATCH, graph.sizes_reversed),
    "sample-rows-from-padded-query-start-loc": ("_run_merged_draft", graph.sample_rows_from_padded_query_start_loc),
    "runner-positions-off-by-one": (POSITIONS, handoff.positions_off_by_one),
    "runner-num-scheduled-tokens-short": (HANDOFF, handoff.num_scheduled_tokens_short),
    "runner-aux-layers-reversed": (HANDOFF, handoff.aux_layers_reversed),
    "unpadded-keeps-the-phantom-requests": (UNPADDED, handoff.unpadded_keeps_the_phantom_requests),
    "runner-one-token-batches-as-new-prompts": (ATTN_STATE, handoff.one_token_batches_as_new_prompts),
    "runner-prefill-state-with-any-new-request": (ATTN_STATE, handoff.prefill_state_with_any_new_request),
    "runner-count-copy-waits-on-its-own-stream": (COUNT_COPY, handoff.count_copy_waits_on_its_own_stream),
    "runner-counts-read-before-their-event": (CORRECTION, handoff.counts_read_before_their_event),
    "runner-counts-of-the-same-row": (CORRECTION, handoff.counts_of_the_same_row),
    "runner-placeholders-reach-the-model": (INPUT_IDS, handoff.placeholders_reach_the_model),
    "runner-new-rows-corrected-as-the-first": (DEVICE_CORRECTION, handoff.new_rows_corrected_as_the_first),
    "runner-bonus-of-the-last-draft": (SPEC_METADATA, sampling.bonus_of_the_last_draft),
    "runner-discarded-samples-booked": (BOOKKEEPING, sampling.discarded_samples_booked),
    "runner-books-a-token-short": (BOOKKEEPING, sampling.books_a_token_short),
    "runner-async-output-events-left-placeholders": (CUDA_WRAPPER, sampling.events_left_placeholders),
    "draft-steps-keep-the-first-pass-state": (UPDATE, meta.attn_state_of_the_first_pass),
    "eagle-draft-steps-as-new-prompts": (UPDATE, meta.other_methods_steps_as_new_prompts),
    "draft-block-size-from-the-first-group": ("initialize_attn_backend", handoff.block_size_from_the_first_group),
    "builder-lists-shared-across-steps": (BUILDER, meta.lists_shared_across_steps),
    "mla-rope-of-the-next-position": (MLA_BUILDER + "build_decode_metadata", mla.rope_of_the_next_position),
    "sfa-lengths-shared-across-steps": (SFA_BUILDER + "_build", sfa.lengths_shared_across_steps),
    "sfa-draft-rope-from-the-cache": (SFA_BUILDER + "_build", sfa.draft_rope_from_the_cache),
    "greedy-keeps-the-first-mismatch": (REJECT_SAMPLE, reject.keeps_the_first_mismatch),
    "bonus-after-a-rejection": (REJECT_SAMPLE, reject.bonus_after_a_rejection),
    "accepts-every-random-draft": (REJECT_SAMPLE, reject.accepts_every_draft),
    "greedy-kernel-lanes-past-the-batch": (REJECT_KERNELS, reject.greedy_lanes_past_the_batch),
    "dp-draft-runs-its-own-size": (DP_SYNC, dp.draft_runs_its_own_size),
    "dp-dummy-run-skips-the-sync": ("dummy_run", dp.dummy_run_skips_the_dp_sync),
    "dp-dummy-replays-a-graph-whatever-its-peers-run": ("dummy_run", dp.dummy_replays_a_graph_whatever_its_peers_run),
    "dp-sample-rows-unpadded-under-lmhead-tp": (LMHEAD_CHECK, dp.sample_rows_unpadded_under_lmhead_tp),
    "dp-lm-head-logits-of-the-peer-rows": (LMHEAD_LOGITS, dp.lm_head_logits_of_the_peer_rows),
    "dp-balance-schedule-without-lookahead": (BALANCE, dp.balance_schedule_without_lookahead),
    "tp-draft-ids-of-the-local-slice": (GREEDY_SAMPLE, tp.draft_ids_of_the_local_slice),
    "tp-logits-not-gathered": (LOGITS_GATHER, tp.logits_not_gathered),
    "tp-verify-ids-of-the-local-slice": (VERIFY_GREEDY, tp.draft_ids_of_the_local_slice),
    "tp-random-candidates-of-the-local-slice": (VERIFY_CANDIDATES, tp.candidate_ids_of_the_local_slice),
    "tp-draft-forward-told-it-is-the-targets": (DRAFT_CONTEXT, tp.forward_told_it_is_the_targets),
}

# name -> the same, for changed vllm-ascends the whole gate must pass (a variant's control: the code
# a variant breaks, done right), so that the variant's check is seen to be of the break alone.
CONTROLS = {
    "host-mirror-read-after-its-sync": (
        "prepare_inputs_padded",
        method.host_mirror_read_before_its_copy_lands(synced=True),
    ),
    "runner-never-prefill-no-cache": (ATTN_STATE, handoff.never_prefill_no_cache),
    "unpadded-slices-the-table-and-slots": (UNPADDED, handoff.unpadded_slices_the_table_and_slots),
    "runner-count-copy-on-the-current-stream": (COUNT_COPY, handoff.count_copy_on_the_current_stream),
    "runner-correction-per-request": (CORRECTION, handoff.correction_per_request),
    "runner-spec-metadata-by-request": (SPEC_METADATA, sampling.spec_metadata_by_request),
    "dp-lm-head-logits-gathered-whole": (LMHEAD_LOGITS, dp.lm_head_logits_gathered_whole),
    "tp-logits-gathered-by-all-reduce": (LOGITS_GATHER, tp.logits_gathered_by_all_reduce),
}


# name -> (the known defect it fixes, or None for a half fix, which must fail; the methods it changes,
# each (method, wrapper)): vllm-ascend with a known defect fixed (``defect_fixes``). A fix must end the
# whole gate with the one line "fixed: ID no longer present; drop it from the list", and pass it with
# the id dropped from the accepted list (--divergences).
FIXES = {
    "seq-lens-lowered": (
        "padded-seq-lens-not-lowered",
        (("_propose", fixes.keeps_rejected_counts), (UPDATE, fixes.seq_lens_lowered())),
    ),
    "seq-lens-lowered-on-the-device-only": (
        None,
        (("_propose", fixes.keeps_rejected_counts), (UPDATE, fixes.seq_lens_lowered(host=False))),
    ),
    "num-computed-from-seq-lens": ("num-computed-tokens-drift", ((UPDATE, fixes.computed_from_seq_lens),)),
    "max-query-len-compacted": ("unpadded-max-query-len", (("prepare_inputs", shared.max_query_len_compacted),)),
    "state-advanced-once-per-step": (
        "draft-state-advanced-per-group",
        (("_propose", fixes.layers_of_their_group), (UPDATE, fixes.advanced_once_per_group_step())),
    ),
    "further-groups-from-the-step-before": (
        None,
        (
            ("_propose", fixes.layers_of_their_group),
            (UPDATE, fixes.advanced_once_per_group_step(from_the_step_before=True)),
        ),
    ),
    "mla-cos-sin-of-each-draft-step": (None, ((MLA_BUILDER + "build_for_drafting", fixes.cos_sin_of_each_draft_step),)),
    "mla-cos-sin-buffer-per-draft-step": (
        "mla-draft-cos-sin-shared",
        (
            (MLA_BUILDER + "build_for_drafting", fixes.cos_sin_buffer_per_draft_step),
            ("dummy_run", fixes.capture_builds_each_draft_step),
        ),
    ),
    "sfa-cos-sin-buffer-per-draft-step": (
        "sfa-graph-steps-replay-the-first-pass",
        (
            (SFA_BUILDER + "build_for_drafting", fixes.sfa_cos_sin_buffer_per_draft_step),
            ("dummy_run", fixes.capture_builds_each_draft_step),
        ),
    ),
    "predecessor-loads-masked": (
        "rejection-kernels-read-before-their-buffer",
        ((REJECT_KERNELS, fixes.predecessor_loads_masked),),
    ),
    "reduce-sample-ids-from-the-slice-start": (
        "reduce-sample-ids-of-a-short-last-shard",
        (
            (GREEDY_SAMPLE, tp.draft_ids_from_the_slice_start),
            (VERIFY_GREEDY, tp.draft_ids_from_the_slice_start),
            (VERIFY_CANDIDATES, tp.candidates_from_the_slice_start),
        ),
    ),
    "runner-top-k-of-every-request": (
        "reduce-sample-top-k-of-the-requests-under-a-slice",
        ((RUNNER_SAMPLE, fixes.runner_top_k_of_every_request),),
    ),
    "torch-path-top-k-over-the-candidates": (
        "reduce-sample-top-k-of-a-slice-or-more-dropped",
        ((TORCH_TOP_K, fixes.top_k_over_the_candidates),),
    ),
    "draft-model-block-table-aligned": (
        "draft-model-graph-block-table-of-padded-requests",
        (("set_inputs_first_pass", fixes.block_table_aligned_with_the_requests),),
    ),
    "draft-model-slots-by-the-kernel-block": (
        "draft-model-first-pass-slots-by-the-block-size",
        (("set_inputs_first_pass", fixes.first_pass_slots_by_the_kernel_block),),
    ),
    "draft-model-grown-seq-lens-kept": (
        "draft-model-graph-seq-lens-of-the-target",
        (("_propose", fixes.grown_seq_lens_kept_in_full_graphs),),
    ),
    "draft-model-query-starts-of-the-call": (
        "draft-model-graph-query-starts-of-the-target",
        (("_propose", fixes.query_starts_of_the_call_in_full_graphs),),
    ),
    "eagle-gathers-through-the-drafts-own-processor": (
        "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",
        (("_run_merged_draft", fixes.gather_through_the_drafts_own_processor),),
    ),
}
# The known defects no fix variant is kept for, and why.
NO_FIX = {
    "overflow-seq-len-restart": (
        "the spec gives seq_len 1 where a step's position reaches max_model_len; the step update's host "
        "mirror knows seq_len only, and in padded mode (seq_lens not lowered) the position is not seq_len - 1, "
        "so a fix must read the positions back from the device: a host sync, which the padded-path property "
        "fails (written so, it failed there: Tensor.cpu x3); and with padded-seq-lens-not-lowered in force "
        "its spec has a valid position attend past max_model_len, where no KV is defined"
    ),
}


def variants() -> list[str]:
    """Every broken vllm-ascend the gate must fail: the variants, and the half fixes among ``FIXES``."""
    return [*VARIANTS, *(name for name, (defect, _) in FIXES.items() if defect is None)]


def apply(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change vllm-ascend as the variant (``VARIANTS``), control (``CONTROLS``) or fix (``FIXES``) ``name`` says."""
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend.build import configured

    known = {**VARIANTS, **CONTROLS, **FIXES}
    if name not in known:
        raise pytest.UsageError(f"{ENV}={name!r}: not a changed vllm-ascend; known: {', '.join(known)}")
    if name in FIXES:
        for target, fixing in FIXES[name][1]:
            if target == REJECT_KERNELS:
                fixing(monkeypatch)
                continue
            if target in MODULE_FUNCTIONS:
                change_function(target, fixing, monkeypatch)
                continue
            if target == RUNNER_SAMPLE:
                change_runner_sample(fixing, monkeypatch)
                continue
            if target.startswith(tuple(BUILDER_MODULES)):
                change_builder(target, fixing, monkeypatch)
                continue
            cls = shared.defining_class(configured(2, 16, 64, 8), target)
            monkeypatch.setattr(cls, target, fixing(getattr(cls, target)))
        return
    target, breaking = known[name]
    if target is not None and target.startswith(tuple(BUILDER_MODULES)):
        change_builder(target, breaking, monkeypatch)
        return
    if target == REJECT_KERNELS:
        breaking(monkeypatch)
        return
    if target == KERNEL_BLOCKS:
        cls = import_ascend("vllm_ascend.worker.block_table").BlockTable
        method = target.split(".")[1]
        monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
        return
    if target == BALANCE:  # the asynchronous scheduler over it schedules by it too
        from sim.impls.kit.ascend import schedulers

        cls = schedulers.scheduler_class("balance", asynchronous=False)
        monkeypatch.setattr(cls, "schedule", breaking(cls.schedule))
        return
    if target in MODULE_FUNCTIONS:
        change_function(target, breaking, monkeypatch)
        return
    if target == CUDA_WRAPPER:  # what the adapter reads off the runner's wrapper
        from sim.impls.vllm_ascend import torch_cuda

        monkeypatch.setattr(
            torch_cuda, "cuda_as_the_runner_leaves_it", breaking(torch_cuda.cuda_as_the_runner_leaves_it)
        )
        return
    if target in (LMHEAD_LOGITS, LOGITS_GATHER):
        cls = import_ascend("vllm_ascend.ops.vocab_parallel_embedding").AscendLogitsProcessor
        method = target.split(".")[1]
        monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
        return
    if target == REJECT_SAMPLE:
        # where the sampler looks it up: vLLM's module too, where the worker's patch bound it there (v0.18.0)
        original = import_ascend("vllm_ascend.sample.rejection_sampler").rejection_sample
        broken = breaking(original)
        for name in ("vllm_ascend.sample.rejection_sampler", "vllm.v1.sample.rejection_sampler"):
            module = import_ascend(name)
            if getattr(module, REJECT_SAMPLE, None) is original:
                monkeypatch.setattr(module, REJECT_SAMPLE, broken)
        return
    if target in (
        POSITIONS,
        INPUT_IDS,
        HANDOFF,
        ATTN_STATE,
        DP_SYNC,
        COUNT_COPY,
        CORRECTION,
        SPEC_METADATA,
        BOOKKEEPING,
    ):
        break_runner(target, breaking, monkeypatch)
        return
    if target == BUILDER:
        cls = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionMetadataBuilder
        monkeypatch.setattr(cls, "build", breaking(cls.build))
        return
    if target == UNPADDED:
        cls = import_ascend("vllm_ascend.attention.utils").AscendCommonAttentionMetadata
        monkeypatch.setattr(cls, "unpadded", breaking(cls.unpadded))
        return
    if target == DISPATCH:
        cls = import_ascend("vllm.v1.cudagraph_dispatcher").CudagraphDispatcher
        monkeypatch.setattr(cls, "dispatch", breaking(cls.dispatch))
        return
    if target is None:
        from sim.impls.vllm_ascend import generation

        module = generation.base_module()
        monkeypatch.setattr(module, "prepare_inputs_padded_kernel", breaking(module.prepare_inputs_padded_kernel))
        return
    cls = shared.defining_class(configured(2, 16, 64, 8), target)
    monkeypatch.setattr(cls, target, breaking(getattr(cls, target)))


BASE = "the drafters' base module"  # generation.base_module(): llm_base_proposer (eagle_proposer on v0.18.0)
# a function of a checkout module (not a method): the target -> its module, where its callers find it
MODULE_FUNCTIONS = {
    DEVICE_CORRECTION: "vllm_ascend.spec_decode.utils",
    LMHEAD_CHECK: BASE,
    GREEDY_SAMPLE: BASE,
    DRAFT_CONTEXT: BASE,
    VERIFY_GREEDY: "vllm_ascend.sample.rejection_sampler",
    VERIFY_CANDIDATES: "vllm_ascend.sample.rejection_sampler",
    TORCH_TOP_K: "vllm_ascend.sample.sampler",
}


def change_function(target: str, changing, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change the module function ``target`` names (a key of ``MODULE_FUNCTIONS``) where its callers find it."""
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend import generation

    where = MODULE_FUNCTIONS[target]
    module = generation.base_module() if where == BASE else import_ascend(where)
    name = target.rsplit(".", 1)[-1]
    monkeypatch.setattr(module, name, changing(getattr(module, name)))


def change_runner_sample(changing, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change the runner's ``_sample`` where the adapter compiles it (``rejection.runner_sample``)."""
    from sim.impls.vllm_ascend import rejection

    original = rejection.runner_sample
    monkeypatch.setattr(rejection, "runner_sample", lambda: changing(original()))


def unreached_builder_methods(name: str) -> list[str]:
    """The builder methods the fix ``name`` changes that the checkout's draft steps never call: v0.21.0rc
    builds them through ``build`` (``generation.steps_built_untold``), not ``build_for_drafting``."""
    from sim.impls.vllm_ascend import generation

    if not generation.steps_built_untold():
        return []
    return [target for target, _ in FIXES[name][1] if target.endswith(".build_for_drafting")]


def change_builder(target: str, changing, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change the method ``target`` names (a key of ``BUILDER_MODULES``, the class's name and a dot, then
    the method's) of the checkout's MLA or SFA builder."""
    from sim.impls.kit.ascend.importing import import_ascend

    class_name, _, method = target.partition(".")
    cls = getattr(import_ascend(BUILDER_MODULES[class_name + "."]), class_name)
    monkeypatch.setattr(cls, method, changing(getattr(cls, method)))


def break_runner(target: str, breaking, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break a runner method the hand-off runs: vLLM's ``_get_positions`` or ``_prepare_input_ids``, or the
    runner's own ``propose_draft_token_ids``, ``_build_attn_state``, ``_sync_metadata_across_dp``,
    ``_copy_valid_sampled_token_count``, ``_correct_optimistic_seq_lens_cpu``, or, where it samples,
    ``_calc_spec_decode_metadata`` or ``_bookkeeping_sync`` (on the adapter's runner view, which holds
    vllm-ascend's)."""
    from sim.impls.kit.ascend import runner_source
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend.build import RunnerView

    vllms = (POSITIONS, INPUT_IDS)
    cls = import_ascend("vllm.v1.worker.gpu_model_runner").GPUModelRunner if target in vllms else RunnerView
    name = target.rsplit(".", 1)[1]
    if cls is RunnerView and not runner_source.defines(name):  # another generation's (v0.22.1rc has no host correction)
        pytest.skip(f"NPUModelRunner.{name} is not in this checkout's runner: nothing of it to break")
    monkeypatch.setattr(cls, name, breaking(getattr(cls, name)))


pytest_configure = shared.session_plugin(ENV, lambda name, monkeypatch: apply(name, monkeypatch))


def apply_in_rank(name: str | None = None):
    """A rank's setup for a case (``DpCase.setup``): the changed vllm-ascend ``name``, else the session's,
    if any (``ENV``), applied in the rank too; returns what undoes it."""
    import os

    patch = pytest.MonkeyPatch()
    if name or os.environ.get(ENV):
        apply(name or os.environ[ENV], patch)
    return patch.undo
