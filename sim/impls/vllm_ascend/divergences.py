"""Where vllm-ascend 0.23.0's proposer differs from the core, by design or by defect: the one table.

docs/DIVERGENCES-vllm-ascend.md explains each entry (what it does to drafts and
to KV); tests/impls/vllm_ascend/ pins each one (the test named in ``pinned_by``
asserts the difference exists, exactly where the entry says). A gate property
that cannot hold under ``--impl vllm_ascend`` is skipped with the divergence as
its reason (``LACKS``).
"""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, rules_of, table
from sim.impls.features import Feature
from sim.impls.kit.host_reads import HostRead, prepare_inputs_padded_reads

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
        "full-graphs-need-padded-batch",
        "_raise_if_padded_drafter_batch_disabled_and_full_graph_enabled",
        "full graphs draft padded and unpadded batches",
        "full graphs with disable_padded_drafter_batch raise NotImplementedError: unpadded drafting runs eagerly only",
        "test_graphs.py::test_full_graphs_refuse_the_unpadded_drafter_batch",
        kind=Kind.DESIGN,
    ),
)


# What a generation has otherwise (``in_force``): main's SFA builder, since vllm-ascend #13958 (2026-08-13),
# copies every build's lengths into buffers of its own, so a replayed step reads the first pass's lengths too.
MAIN = {
    SFA_GRAPH_STEPS.id: dataclasses.replace(
        SFA_GRAPH_STEPS,
        impl=SFA_GRAPH_STEPS.impl.replace(
            "at the first pass's row i's position,",
            "at the first pass's row i's position and reads the first pass's query offsets and key lengths "
            "(main's builder copies every build's lengths into its own buffers, the first pass's into those a "
            "replayed step reads: vllm-ascend #13958),",
        ),
        rule={"graph_steps_rope_of_first_pass": True, "graph_steps_lengths_of_first_pass": True},
    ),
}


# v0.21.0rc and v0.22.1rc's (``generation.capture_reads_group_0``): the dummy run's captures on group 0's block
# table (0.23.0 takes the draft's group's: vllm-ascend #11062, with DeepSeek V4's MTP graphs, and #11866) and on
# the slot buffers the last call left.
CAPTURE_GROUP_0 = Divergence(
    "full-graph-capture-reads-group-0-block-table",
    "AscendSpecDecodeBaseProposer.dummy_run (block_table_tensor=self.runner.input_batch.block_table[0])",
    "a replayed draft graph reads the block table of the draft's own KV-cache group",
    "the dummy run captures every draft graph on KV-cache group 0's block table; where the draft's layers "
    "have a group of their own (a hybrid target, DeepSeek V4's compressed caches), every replay's attention "
    "reads another group's blocks: other drafts, or KV read past the cache. A crash or other drafts: nothing "
    "of it is modelled; the other full-graph runs hold the draft's blocks in group 0 too, as a deployment "
    "whose draft shares group 0 does (build.drafts_in_group_0), and the pin runs the two-group layout",
    "test_graphs.py::test_a_replay_reads_the_block_table_of_the_drafts_group",
    kind=Kind.DEFECT,
    setting={"graph_mode": "full", "padded": True},
)
DUMMY_WRITES_KV = Divergence(
    "dummy-run-writes-kv-at-the-last-calls-slots",
    "AscendSpecDecodeBaseProposer.dummy_run (common_attn_metadata.slot_mapping = self.slot_mapping_group[draft_index])",
    "a dummy run writes no KV: its batch's slots are -1, and each draft step's capture is built on them",
    "the dummy run builds each draft step's metadata on the per-step slot buffer as the last real call left "
    "it (0.23.0 copies the dummy batch's slots in first), so its forwards write draft KV at the last call's "
    "slots: over the KV of that call's requests, where they live on (an idle DP rank's dummy batches, a "
    "decode node waiting for KV). Captures at start-up write the null block (the buffers are zeros). "
    "Tolerated exactly (the writes at the last call's slots, graphs.writes_no_kv), any other write fails",
    "test_graphs.py::test_a_dummy_run_after_a_call_writes_no_kv",
    kind=Kind.DEFECT,
)
EAGLE_OWN_COLUMNS = Divergence(
    "eagle-reduce-sample-drafts-each-ranks-own-argmax",
    "vllm_ascend/spec_decode/llm_base_proposer.py: _run_merged_draft, and its draft steps (enable_reduce_sample: "
    'self.method in ("mtp"), a substring test of a string; method eagle: compute_logits, then argmax)',
    "an EAGLE-1 drafter under reduce sampling drafts the argmax over the whole vocabulary, whichever TP rank's "
    "slice of the lm head holds it",
    'an EAGLE-1 draft takes neither the eagle3 branch nor the mtp one ("eagle" is no substring of "mtp"): the '
    "plain branch takes the argmax of compute_logits, which under reduce sampling is the rank's own columns (the "
    "logits processor gathers nothing): each rank drafts its slice's argmax as an index into it, and no "
    "collective is issued; on TP > 1 every EAGLE-1 draft is wrong, each rank's differently (0.23.0 raises "
    "there instead: eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks). Modelled on the ranks "
    "(Rules.sample_report: a rank's own columns, another rank's ids never reported)",
    "test_tensor_parallel.py::test_an_eagle_drafter_under_reduce_sample_follows_its_known_defect",
    kind=Kind.DEFECT,
)
MTP_GATHER = Divergence(
    "mtp-reduce-sample-gathers-a-short-last-shard",
    "vllm_ascend/spec_decode/llm_base_proposer.py: _run_merged_draft, and its draft steps (enable_reduce_sample, "
    "method mtp: self.model.model.logits_processor._gather_logits(self.model.compute_logits(...)), then argmax)",
    "an MTP drafter under reduce sampling drafts the argmax over the whole vocabulary, however it is split",
    "the MTP draft all-gathers each rank's columns of compute_logits (0.23.0 reduces them through greedy_sample): "
    "where the vocabulary is not a multiple of 64 per rank the last rank keeps fewer columns, and the gather is "
    "a collective of mismatched sizes (gloo: the connection reset) or hands an id past the vocabulary. A crash: "
    "nothing of it is modelled; latent for whole-slice vocabularies (every model served), where the drafts "
    "meet the spec; the pin runs the short last shard",
    "test_tensor_parallel.py::test_reduce_sample_over_a_short_last_shard_follows_the_defect_or_the_spec",
    kind=Kind.DEFECT,
)
V0_22 = {d.id: d for d in (CAPTURE_GROUP_0, DUMMY_WRITES_KV, EAGLE_OWN_COLUMNS, MTP_GATHER)}
SFA_COS_SIN_SHARED = Divergence(
    "sfa-draft-cos-sin-shared",
    "AscendSFAMetadataBuilder.build (sfa_v1.py: get_cos_and_sin_mla(input_positions, True)), which "
    "attn_update_stack_num_spec_norm calls for every draft step",
    "each draft step's attention metadata holds its own positions' cos and sin until its forward",
    "every build writes the cos/sin of all its rows into the one global _cos_mla / _sin_mla buffer and hands "
    "a view of it (the builder is not told the step); _propose builds every step before the first forward, "
    "so with K >= 2 the first pass's first B rows and every step but the last rotate at the last step's "
    "positions, their queries and the KV they write; in a captured graph likewise (the captures hold views "
    "of that buffer). The low acceptance of SFA drafts with K > 1 that vllm-ascend #10878 fixed on main, "
    "not on this branch",
    "test_sfa_builder.py::test_draft_steps_share_the_sfa_cos_sin_buffer",
    kind=Kind.DEFECT,
    rule={"sfa_rope_from_last_build": True},
    setting={"draft_attn": "sfa", "block_size": 128},
)
V0_21 = {**V0_22, SFA_COS_SIN_SHARED.id: SFA_COS_SIN_SHARED}
DUMMY_STALE_INDICES = Divergence(
    "dummy-run-samples-at-the-last-calls-indices",
    "AscendSpecDecodeBaseProposer.dummy_run (_runnable(..., token_indices_to_sample="
    "self.token_indices_to_sample[:batch_size * self.extra_slots_per_request]))",
    "a dummy run samples its own rows: what it computes is thrown away, and it reads nothing past its batch",
    "the dummy run hands its forward the sample indices as the last real call left them, and "
    "_run_merged_draft gathers last_hidden_states at them: where that call sampled a row past the dummy "
    "batch's, the gather is out of bounds (IndexError here; on an NPU the index kernel's bound check), so "
    "every idle data-parallel rank that served a larger batch before fails at its next dummy batch, and so "
    "does a dummy run after a call. vllm-ascend #10080 clears them first (v0.21.0rc on). A crash: sidestepped "
    "as that fix does everywhere but the pin (crashes.sidestepped), which runs it",
    "test_graphs.py::test_a_dummy_run_after_a_larger_call_crashes_where_its_known_defect_says",
    kind=Kind.DEFECT,
)
NO_TOP_K_RAISES = Divergence(
    "reduce-sample-random-without-a-top-k-raises",
    "vllm_ascend/sample/sampler.py: _apply_top_k_top_p_pytorch and _apply_top_k_top_p_ascendc "
    "(enable_reduce_sample: torch.topk(logits, k=top_k)), from AscendRejectionSampler.forward's "
    "apply_sampling_constraints(..., self.top_k)",
    "under reduce sampling, a random request without a top-k draws from the target's whole distribution",
    "each rank takes its top_k best columns, top_k being what the runner's _sample prepared, which it does "
    "only when some request has a top-k: a batch of random requests none of which has one hands top_k=None "
    "and torch.topk raises (TypeError), on the torch path and on A2/A3's alike. vllm-ascend #10004 takes "
    "every column then, and hands the gathered candidates on (v0.21.0rc on). A crash, not sidestepped (the "
    "fix also changes what the sampler returns): where it is in force, random rows without a top-k under "
    "reduce sampling are its pin's alone, the tests that draw them say so; random rows beside a top-k "
    "request are compared",
    "test_tensor_parallel_sampling.py::test_random_rows_on_tp_ranks_are_draws_of_the_targets_distribution",
    kind=Kind.DEFECT,
)
PADDING_STALE_INDICES = Divergence(
    "graph-padding-samples-at-the-last-calls-indices",
    "AscendSpecDecodeBaseProposer._propose (self.token_indices_to_sample[:token_indices_to_sample_len]"
    ".copy_(token_indices_to_sample), nothing written past it)",
    "a draft graph's padding rows sample rows of the graph: what they compute is thrown away",
    "_propose writes this call's sample indices into the front of the drafter's index buffer and leaves "
    "the rest as the last call left it; a replayed graph gathers last_hidden_states at as many indices as "
    "its capture's requests, so a call of fewer requests padded to a captured size gathers its padding rows "
    "at the last call's indices, out of bounds where that call sampled past the graph's rows (IndexError "
    "here; on A5 the index kernel's bound check, on A2/A3 a read past the rows). vllm-ascend #9867 clears "
    "the rest (v0.21.0rc on). A crash: sidestepped as that fix does everywhere but the pin "
    "(crashes.sidestepped), which runs it",
    "test_graphs.py::test_a_replay_padded_past_a_smaller_call_crashes_where_its_known_defect_says",
    kind=Kind.DEFECT,
)
V0_20 = {
    **V0_21,
    **{d.id: d for d in (DUMMY_STALE_INDICES, PADDING_STALE_INDICES, NO_TOP_K_RAISES)},
}
# A generation -> (what it has otherwise or besides, what of 0.23.0's it has not): v0.21.0rc and v0.22.1rc's
# EAGLE-1 drafter takes another branch (EAGLE_OWN_COLUMNS) than the one that raises on 0.23.0; v0.21.0rc's
# SFA builder rotates every build through the global buffer, so its graph steps read what eager ones do;
# v0.20.2rc's reduce sampling keeps a top-k over the whole vocabulary it scatters its candidates into.
# v0.18.0's (refused by checkout.NOT_RUN until it runs whole; docs/upstream-ci.md): v0.20.2rc's, as far as its
# single-rank eager gate has shown, and vLLM 0.18's step 1, which looks the backup token up at seq_len.
OWN = {
    "main": (MAIN, ()),
    "0.22.1": (V0_22, ("eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",)),
    "0.21.0": (
        V0_21,
        ("eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks", "sfa-graph-steps-replay-the-first-pass"),
    ),
    "0.20.2": (
        V0_20,
        (
            "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",
            "sfa-graph-steps-replay-the-first-pass",
            "reduce-sample-top-k-of-a-slice-or-more-dropped",
        ),
    ),
    "0.18.0": (
        V0_20,
        (
            "backup-token",
            "rejection-kernels-read-before-their-buffer",  # its kernels clamp the index: tl.maximum(offset - 1, 0)
            "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",
            "sfa-graph-steps-replay-the-first-pass",
            "reduce-sample-top-k-of-a-slice-or-more-dropped",
        ),
    ),
}


@functools.cache
def in_force(generation: str) -> SimpleNamespace:
    """The divergences module's face (``sim.impls.kit.factory``) for ``generation`` (``0.20.2``, ``0.21.0``,
    ``0.22.1``, ``0.23.0`` or ``main``): the entries as that generation has them, and the rules that model them.
    Made once per generation: the adapter asks it on every drafter call (``crashes.sidestepped``), and its
    readers copy what they keep."""
    besides, lacking = OWN.get(generation, ({}, ()))
    kept = {i: d for i, d in {**DIVERGENCES, **besides}.items() if i not in lacking}
    reads = HOST_READS_0_18 if generation == "0.18.0" else HOST_READS
    lacks = {**LACKS, **LACKS_OWN.get(generation, {})}
    return SimpleNamespace(DIVERGENCES=kept, RULES=rules_of(kept.values()), LACKS=lacks, HOST_READS=reads)


# The divergences the reference models (sim.oracle.rules), so the gate's properties run on vllm-ascend.
RULES = rules_of(DIVERGENCES.values())

# What it cannot run (sim.impls.features): a property using one is skipped with this reason. Full
# graphs run (ACL graphs on the simulator's recorder, sim.impls.kit.ascend.fake_npu_graphs); piecewise
# ones cannot be made for the tiny draft model, and unpadded full graphs are refused by vllm-ascend.
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
MLA_ONE_GROUP = "an MLA draft is one attention layer here (its indexer's group is the SFA family's, not modelled)"
LACKS = {
    Feature.PIECEWISE_GRAPHS: Skip(PIECEWISE),
    Feature.MROPE: Skip("the adapter's target is the tiny DeepSeek-V3, text-only: its positions are one row"),
    Feature.UNPADDED_FULL_GRAPHS: Skip("full-graphs-need-padded-batch: vllm-ascend refuses full graphs unpadded"),
}

# What a generation's runner does that the harness does not drive: vLLM 0.18 (releases/v0.18.0) corrects
# the next step of asynchronous scheduling in its _update_states, on the host, from the request states the
# scheduler hands it; the harness models the device-side correction of vLLM 0.21 on.
LACKS_OWN = {
    "0.18.0": {
        Feature.ASYNC_SCHEDULING: Skip(
            "vLLM 0.18 corrects an asynchronous step's counts in GPUModelRunner._update_states (host request "
            "states), which the harness does not drive; it drives the device-side correction of vLLM 0.21 on"
        ),
    },
}

# The padded path's reads of host tensors, named for the sync property (sim.impls.kit.host_reads): on the
# CPU device they look like syncs. The same lines in every generation, in the base class's file: v0.18.0
# has it in eagle_proposer.py (in_force).
HOST_READS = prepare_inputs_padded_reads("vllm_ascend/spec_decode/llm_base_proposer.py")
HOST_READS_0_18 = (
    *prepare_inputs_padded_reads("vllm_ascend/spec_decode/eagle_proposer.py"),
    HostRead(  # its step 1 looks each request's backup token up at its host length (vLLM 0.18's rule)
        "Tensor.item",
        "vllm_ascend/spec_decode/eagle_proposer.py",
        "<listcomp>",
        "requests[gpu_input_batch.req_ids[i]].get_token_id(common_attn_metadata.seq_lens_cpu[i].item())",
        "seq_lens_cpu, the host mirror",
    ),
)
