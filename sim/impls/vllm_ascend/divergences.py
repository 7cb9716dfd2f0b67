"""Where vllm-ascend 0.23.0's proposer differs from the core, by design or by defect: the one table.

docs/DIVERGENCES-vllm-ascend.md explains each entry (what it does to drafts and
to KV); tests/impls/vllm_ascend/ pins each one (the test named in ``pinned_by``
asserts the difference exists, exactly where the entry says). A gate property
that cannot hold under ``--impl vllm_ascend`` is skipped with the divergence as
its reason (``LACKS``).
"""

from __future__ import annotations

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, rules_of, table
from sim.impls.features import Feature
from sim.impls.kit.host_reads import prepare_inputs_padded_reads

SFA_GRAPH_STEPS = Divergence(
    "sfa-graph-steps-replay-the-first-pass",
    "the dummy run's build_for_graph_capture of every draft step; AscendSFAMetadataBuilder._build "
    "(sfa_v1.py: get_cos_and_sin_mla(..., use_cache=draft_index is None))",
    "each draft step's forward reads its own metadata, in a captured graph as eagerly",
    "under full graphs (the merged draft graph) the dummy run builds every step as a first pass "
    "(build_for_graph_capture: draft_index None), so the captured kernels read the buffers a first pass's "
    "build writes; a real call's draft steps write their own (cos/sin gathered afresh, vllm-ascend #10878), "
    "which no replay reads: in a call that replays a graph, steps 2..K rotate row i at the first pass's "
    "row i's position, their queries and the KV they write (eagerly right)",
    "test_sfa_builder.py::test_graph_steps_replay_the_first_pass",
    kind=Kind.DEFECT,
    rule={"graph_steps_rope_of_first_pass": True},
    setting={"draft_attn": "sfa", "block_size": 128, "graph_mode": "full", "padded": True},  # full graphs: padded
)


DIVERGENCES = table(
    Divergence(
        "padded-seq-lens-not-lowered",
        "AscendSpecDecodeBaseProposer._propose (overrides vLLM 0.23 EagleProposer.propose)",
        "steps 2..K attend to seq_len = (seq_len - n_rej) + j - 1: the accepted prefix plus earlier drafts",
        "padded mode never subtracts num_rejected_tokens_gpu (vLLM 0.23 does: cad.seq_lens -= num_rejected): "
        "step j attends to seq_len + j - 1, n_rej keys too many, the rejected tokens' KV among them",
        "test_steps.py::test_padded_seq_lens_not_lowered",
        kind=Kind.DEFECT,
        rule={"padded_seq_lens_lowered": False},
    ),
    Divergence(
        "overflow-seq-len-restart",
        "attn_update_stack_num_spec_norm",
        "every step whose position reaches max_model_len: position 0, seq_len 1, slot -1",
        "position 0 and slot -1 likewise, but seq_len is raised before the test (seq_len > max_model_len -> 1), "
        "so the next steps get 2, 3, ...; with padded-seq-lens-not-lowered it also trips while the position "
        "is still valid (seq_len 1 with a real slot)",
        "test_steps.py::test_overflow_seq_len_restart",
        kind=Kind.DEFECT,
        rule={"overflow_seq_len": "own-restart"},
    ),
    Divergence(
        "backup-token",
        "prepare_next_token_ids_padded",
        "a request without a valid sampled token continues from its token at seq_len",
        "from get_token_id(num_tokens_no_spec - 1), the last known token (vLLM's rule; the unpadded path "
        "uses the token at seq_len)",
        "test_step_one.py::test_backup_token_divergence",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "stale-last-row",
        "set_inputs_first_pass",
        "the last row of the flattened batch keeps its own id when it is not a sample row",
        "that row is never written: it keeps the buffer's old value (padded, last request rejected a draft)",
        "test_prepare.py::test_stale_last_row_divergence",
        kind=Kind.DESIGN,
        rule={"stale_last_row": True},
    ),
    Divergence(
        "unpadded-max-query-len",
        "prepare_inputs",
        "max_query_len of the compacted batch",
        "max_query_len of the original query lengths (an upper bound)",
        "test_prepare.py::test_unpadded_max_query_len_divergence",
        kind=Kind.DEFECT,
        rule={"max_query_len_compacted": False},
    ),
    Divergence(
        "slot-mapping-in-place",
        "prepare_inputs",
        "the caller's batch is never written",
        "the caller's slot_mapping is compacted in place (accepted rows first, -1 tail); the adapter hands a copy",
        "test_prepare.py::test_prepare_inputs_rewrites_caller_slot_mapping",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "mtp-steps-run-padded-rows",
        "_run_merged_draft",
        "steps 2..K run one row per request",
        "for method mtp (any method once the drafter has graphs), steps 2..K run at the first pass's row count; "
        "rows past B hold stale inputs, slot -1",
        "test_propose.py::test_steps_run_at_first_pass_rows",
        kind=Kind.DESIGN,
        rule={"steps_run_first_pass_rows": True},
    ),
    Divergence(
        "dense-draft-skips-the-dp-sync",
        "_sync_metadata_across_dp (should_skip_allreduce_across_dp_group)",
        "data-parallel ranks draft at one synced size, under one num_tokens_across_dp",
        "a draft without experts (an EAGLE-3 head) syncs nothing with its DP peers: each rank drafts at its "
        "own size, its forwards told that size for every rank; nothing in a dense draft meets the peers",
        "test_data_parallel.py::test_an_eagle_drafter_syncs_nothing_with_its_dp_peers",
        kind=Kind.DESIGN,
        rule={"dense_drafts_skip_dp_sync": True},
    ),
    Divergence(
        "num-computed-tokens-drift",
        "attn_update_stack_num_spec_norm",
        "at draft step j the host count of tokens before each query (num_computed_tokens_cpu) is seq_len - 1",
        "the first pass's count advanced by one per step (num_computed_tokens_cpu[:batch_size] += 1) while every "
        "query becomes one token: short by the first pass's query length less one",
        "test_propose.py::test_num_computed_tokens_drift",
        kind=Kind.DEFECT,
        rule={"num_computed_from_first_pass": True},
    ),
    Divergence(
        "draft-state-advanced-per-group",
        "_propose (its draft-step loop over draft_attn_groups), attn_update_stack_num_spec_norm",
        "each draft step advances the per-step state once (seq_lens and their host mirrors, the position "
        "a slot is looked up at, num_computed_tokens_cpu), and each draft layer attends with that step's metadata",
        "the loop calls attn_update_stack_num_spec_norm once per draft attention group, each call chained on "
        "the previous one's: with G groups a step's seq_lens, slots and host counts advance G times while the "
        "model's positions advance once, so step j attends to G(j-1) - (j-1) keys it must not see and writes "
        "its KV G(j-1) - (j-1) slots ahead; every layer is handed the last group's metadata "
        "(vllm-ascend issue #16980; upstream's fix is pull request #16793)",
        "test_draft_groups.py::test_two_groups_advance_the_state_twice_per_step",
        kind=Kind.DEFECT,
        rule={"state_advances_per_group": True},
        setting={"draft_attn_groups": 2},
    ),
    Divergence(
        "mla-draft-cos-sin-shared",
        "AscendMLAMetadataBuilder.build_decode_metadata (mla_v1.py: get_cos_and_sin_mla(..., use_cache=True))",
        "each draft step's attention metadata holds its own positions' cos and sin until its forward",
        "every build writes its decode cos/sin into the one global _cos_mla / _sin_mla buffer and hands a view "
        "of it; _propose builds every step before the first forward, so with K >= 2 every step but the last "
        "rotates its decode rows (the first pass: its first B rows) at the last step's positions, its KV "
        "written so (the SFA builder's like defect was fixed by vllm-ascend #10878)",
        "test_mla_builder.py::test_draft_steps_share_the_mla_cos_sin_buffer",
        kind=Kind.DEFECT,
        rule={"rope_from_last_build": True},
        setting={"draft_attn": "mla"},
    ),
    SFA_GRAPH_STEPS,
    Divergence(
        "rejection-kernels-read-before-their-buffer",
        "vllm_ascend/ops/triton/reject_sample.py: rejection_greedy_sample_triton, rejection_random_sample_kernel, "
        "sample_recovered_tokens_kernel, expand_kernel",
        "a kernel reads and writes inside its arguments only",
        "for request 0 each kernel loads element -1 of its cumulative draft counts: "
        "tl.where(offset == 0, 0, tl.load(ptr + offset - 1, mask)) evaluates the load whatever the condition "
        "(the recovered-token kernel's load has no mask at all). The value is discarded, so the output rows "
        "are right, but on an NPU the load reads whatever is mapped before the tensor and sometimes faults "
        "(MTE DDR out-of-range; vllm-ascend #14902, fixed upstream by #16215 after 2026-08-22). Each such "
        "access is tolerated exactly (kit.kernel_bounds) and every other one checked",
        "test_rejection_sampler.py::test_the_kernels_read_before_their_cumulative_counts",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "reduce-sample-ids-of-a-short-last-shard",
        "vllm_ascend/spec_decode/llm_base_proposer.py: greedy_sample, and sample/rejection_sampler.py's for the "
        "target's verification (enable_reduce_sample, TP > 1)",
        "a draft token is the argmax over the whole vocabulary, whichever TP rank's slice of the lm head holds it",
        "each rank reports its slice's argmax as local index + rank * V_local, V_local the columns the logits "
        "processor kept (num_org_embeddings_per_partition); vLLM splits the vocabulary padded to a multiple "
        "of 64, so where the vocabulary is not one, the last rank keeps fewer columns than its slice's start "
        "is apart, and an argmax there is reported that many ids low (vocabulary 96 on 2 ranks: 64..95 "
        "reported as 32..63); the rejection sampler reports the target's argmax so, and verifies drafts against "
        "it, and for random requests gathers as many candidates as each rank's columns (apply_top_k_top_p): "
        "unequal there, a collective of mismatched sizes. Modelled on the TP ranks that show it "
        "(Rules.sample_report, set from the mesh; the mismatch pinned); "
        "latent for the vocabularies of the models served, all multiples of 64",
        "test_tensor_parallel.py::test_reduce_sample_over_a_short_last_shard_follows_the_defect_or_the_spec",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "reduce-sample-top-k-of-the-requests-under-a-slice",
        "NPUModelRunner._sample (enable_reduce_sample, any request with top-k: "
        "max_topk = top_k_cpu[top_k_cpu < logits.shape[1]].max(), handed to prepare_sampling)",
        "each TP rank's candidates (apply_top_k_top_p: its top max_topk ids) hold every id a request's "
        "top-k may keep: max_topk at least the smaller of the batch's largest top-k and the rank's columns",
        "max_topk is the largest top-k below the rank's columns only: a request whose top-k is at least a "
        "rank's columns, or one without top-k (its top_k_cpu the vocabulary) beside a request with one, gets "
        "the smaller top-k's candidates, and draws from a truncated distribution (the target's tokens and "
        "the drafts' verification alike); a batch whose every top-k is at least a rank's columns raises "
        "(the max of nothing). Latent for top-ks below a rank's slice (about 19k ids for a 152k vocabulary "
        "on 8 ranks); a top-k request beside plain sampling ones is not: run on TP ranks, the plain "
        "requests never draw outside each rank's 20 best",
        "test_rejection_sampler.py::test_the_runner_prepares_the_sampler_for_every_requests_top_k",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "reduce-sample-top-k-of-a-slice-or-more-dropped",
        "vllm_ascend/sample/sampler.py: _apply_top_k_top_p_pytorch (enable_reduce_sample, TP > 1), the "
        "sampler's torch path: Ascend devices other than A2/A3 (A2/A3 call torch_npu.npu_top_k_top_p)",
        "a request's top-k keeps its k best ids of the whole vocabulary, however the vocabulary is split "
        "over the TP ranks; only a top-k of the whole vocabulary is no top-k",
        "k is clamped to one rank's columns (V_local) and a clamped k equal to V_local marks the row as "
        "without top-k, so a request whose top-k is at least a rank's columns keeps every gathered "
        "candidate and draws from its whole distribution (top-k 64 over 128 ids on 2 ranks: about a sixth of "
        "its draws outside its 64 best). Seen with the runner's top-k fix in the ranks (without it such a "
        "top-k is dropped before: reduce-sample-top-k-of-the-requests-under-a-slice); latent for top-ks "
        "below a rank's slice",
        "test_tensor_parallel_sampling.py::test_a_top_k_of_a_slice_or_more_on_the_torch_path_follows_the_defect_or_the_spec",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",
        "vllm_ascend/spec_decode/llm_base_proposer.py: _run_merged_draft, and its draft steps "
        "(enable_reduce_sample, method eagle: self.model.model.logits_processor._gather_logits)",
        "an EAGLE-1 drafter under reduce sampling drafts what it drafts with the logits gathered",
        "for a method other than mtp, eagle3 and dflash, the reduce-sample branch gathers the logits through "
        "the draft's inner model's logits processor; vLLM's EAGLE-1 Llama draft (EagleLlamaForCausalLM) keeps "
        "its logits processor on itself, its inner model a LlamaModel without one, so the first draft raises "
        "AttributeError: an EAGLE-1 drafter cannot serve with enable_reduce_sample, on one rank or many. "
        "A crash: nothing of it is modelled; the pin runs it on TP ranks, and the gathered path is compared",
        "test_tensor_parallel.py::test_an_eagle_drafter_under_reduce_sample_follows_its_known_defect",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "full-graphs-uniform-decode-only",
        "_propose (runner.cudagraph_dispatcher.dispatch, FULL_DECODE_ONLY)",
        "in a graph mode every batch up to the largest captured size runs padded to a captured size",
        "full graphs are captured for uniform decode batches only (every request num_spec_tokens + 1 "
        "tokens, none on its prompt's first chunk: the runner's _determine_batch_execution_and_padding; "
        "the sizes rounded up to multiples of it by vLLM); a batch with a prefill, or a request with "
        "fewer drafts, runs eagerly at its own row count",
        "test_graphs.py::test_a_batch_with_a_prefill_runs_eagerly_in_full_graph_mode",
        kind=Kind.DESIGN,
        rule={"graphs_uniform_decode_only": True},
    ),
    Divergence(
        "draft-model-graph-block-table-of-padded-requests",
        "set_inputs_first_pass (needs_extra_input_slots: method draft_model): vLLM's compute_new_slot_mapping on "
        "the metadata the runner hands after a FULL-graph step (AscendCommonAttentionMetadata.unpadded)",
        "a draft model's first pass lays out the slots of its batch's requests, whatever the target's step padded",
        "unpadded() keeps the padded requests' block-table rows, and compute_new_slot_mapping counts the requests "
        "by those rows: after a target step that padded its requests (a uniform decode between two capture "
        "sizes) the first pass raises in repeat_interleave (vllm-ascend #14714, open). A crash: nothing of it "
        "is modelled; the pin runs it, and a draft model's full graphs are not run (DRAFT_MODEL_FULL_GRAPHS)",
        "test_draft_model.py::test_a_draft_model_after_a_padded_target_step_follows_its_known_defect",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "draft-model-graph-seq-lens-of-the-target",
        "_propose, the branch of a FULL-graph drafter step (aclgraph_runtime_mode == FULL): "
        "common_attn_metadata.seq_lens = self._adjust_tensor(self.runner.seq_lens, ...)",
        "a draft model's first pass attends with seq_lens one longer than the target's (its next token's row)",
        "a drafter step that dispatches to a FULL graph takes the runner's seq_lens and host lengths, the "
        "target's: a draft model's first pass, grown by one row per request, attends one key short (each row "
        "up to the key before its own), and its steps after it: every draft of a replayed call changes. Not "
        "modelled; the pin runs it, and a draft model's full graphs are not run (DRAFT_MODEL_FULL_GRAPHS)",
        "test_draft_model.py::test_a_draft_model_in_a_full_graph_follows_its_known_defect",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "draft-model-first-pass-slots-by-the-block-size",
        "set_inputs_first_pass (needs_extra_input_slots: method draft_model, and parallel drafting): vLLM's "
        "compute_new_slot_mapping(block_size=self.draft_attn_groups[0].kv_cache_spec.block_size)",
        "a draft model's first pass looks each row's slot up in the runner's block table by the table's block size",
        "over a hybrid target's kernel blocks (Qwen3.5's layout: the runner's table holds kernel blocks of 128 "
        "tokens, the KV-cache group's blocks are larger) the first pass indexes the table by the group's block "
        "size: each row's KV is written to, and read from, another block's slots (past the cache, or another "
        "request's KV). The step update takes the kernel block size there (has_gdn, #12000); this path does not. "
        "Not modelled; the pin runs it, and a draft model over kernel blocks is not run (DRAFT_MODEL_KERNEL_BLOCKS)",
        "test_draft_model.py::test_a_draft_model_over_kernel_blocks_follows_its_known_defect",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "full-graphs-need-padded-batch",
        "_raise_if_padded_drafter_batch_disabled_and_full_graph_enabled",
        "full graphs draft padded and unpadded batches",
        "full graphs with disable_padded_drafter_batch raise NotImplementedError: unpadded drafting runs eagerly only",
        "test_graphs.py::test_full_graphs_refuse_the_unpadded_drafter_batch",
        kind=Kind.DESIGN,
    ),
)


# The divergences the reference models (sim.oracle.rules), so the gate's properties run on vllm-ascend.
RULES = rules_of(DIVERGENCES.values())

# What it cannot run (sim.impls.features): a property using one is skipped with this reason. Full
# graphs run (ACL graphs on the simulator's recorder, sim.impls.kit.ascend.fake_npu_graphs); piecewise
# ones cannot be made for the tiny draft model, and unpadded full graphs are refused by vllm-ascend. What it
# lacks of vllm-ascend's own schedulers is read off the checkout's files (scheduler_lacks, in branch_divergences).
PIECEWISE = (
    "vllm-ascend's piecewise draft graphs come from torch.compile of a vLLM draft model class (its ACL "
    "piecewise backend); the draft model here is the simulator's tiny model, nothing to compile"
)
ONE_RANK_SAMPLES = (
    "the runner's sampling half is driven on one rank here (Scenario.runner_samples); on DP and TP ranks the"
    " hand-off is handed the sampled tokens"
)
GROUPS_EAGER = (
    "a draft of several attention groups runs eagerly here: its full graphs would capture the tiny "
    "attention's task per layer, and the recording draft captures one layer's"
)


LACKS = {
    Feature.PIECEWISE_GRAPHS: Skip(PIECEWISE),
    Feature.MROPE: Skip("the adapter's target is the tiny DeepSeek-V3, text-only: its positions are one row"),
    Feature.UNPADDED_FULL_GRAPHS: Skip("full-graphs-need-padded-batch: vllm-ascend refuses full graphs unpadded"),
    Feature.DRAFT_MODEL_FULL_GRAPHS: Skip(
        "draft-model-graph-block-table-of-padded-requests, draft-model-graph-seq-lens-of-the-target: vllm-ascend's "
        "draft-model drafter in full graphs crashes or attends one key short (both pinned); its fix in review "
        "(vllm-ascend #14510) drafts eagerly there"
    ),
    Feature.DRAFT_MODEL_KERNEL_BLOCKS: Skip(
        "draft-model-first-pass-slots-by-the-block-size: vllm-ascend's draft-model first pass looks its slots up "
        "in a hybrid target's table of kernel blocks by the KV-cache group's block size (pinned)"
    ),
}

# The padded path's reads of host tensors, named for the sync property (sim.impls.kit.host_reads): on the
# CPU device they look like syncs. The same lines in every generation, in the base class's file (v0.18.0's:
# branch_divergences.HOST_READS_0_18).
HOST_READS = prepare_inputs_padded_reads("vllm_ascend/spec_decode/llm_base_proposer.py")
