"""What the other vllm-ascend generations the adapter drives have otherwise than 0.23.0's table
(``divergences``): main's, and the release branches' before it, each by the facts of its code
(``generation.name``); ``in_force``, one generation's table, rules and lacks.
"""

from __future__ import annotations

import dataclasses
import functools
from types import SimpleNamespace

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, rules_of
from sim.impls.features import Feature
from sim.impls.kit.host_reads import HostRead, prepare_inputs_padded_reads
from sim.impls.vllm_ascend import scheduler_lacks
from sim.impls.vllm_ascend.divergences import DIVERGENCES, HOST_READS, LACKS, SFA_GRAPH_STEPS

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
    "Tolerated exactly (the writes at the last call's slots, dummy_kv.writes_no_kv), any other write fails",
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
# v0.22.1rc's and earlier (0.23.0 pads a copy of the call's query starts in a buffer of the drafter's own)
DRAFT_MODEL_QUERY_STARTS = Divergence(
    "draft-model-graph-query-starts-of-the-target",
    "_propose, the branch of a FULL-graph drafter step (aclgraph_runtime_mode == FULL): "
    "common_attn_metadata.query_start_loc = self.runner.query_start_loc.gpu[: num_reqs_padded + 1]",
    "a draft model's first pass attends with its own query starts, one row longer per request than the target's",
    "a drafter step that dispatches to a FULL graph takes the runner's query starts, the target's, padded: a draft "
    "model's first pass, grown by one row per request, splits its rows at the target's starts (each request's "
    "grown row read as the next one's), beside draft-model-graph-seq-lens-of-the-target. Not modelled; the pin "
    "runs it with that one fixed, and a draft model's full graphs are not run (DRAFT_MODEL_FULL_GRAPHS)",
    "test_draft_model.py::test_a_draft_models_full_graph_query_starts_follow_their_known_defect",
    kind=Kind.DEFECT,
)
V0_22 = {d.id: d for d in (CAPTURE_GROUP_0, DUMMY_WRITES_KV, EAGLE_OWN_COLUMNS, MTP_GATHER, DRAFT_MODEL_QUERY_STARTS)}
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
MTP_MODEL_GRAPH = Divergence(
    "mtp-draft-steps-replay-one-model-graph",
    "AscendEagleProposer._maybe_share_lm_head (eagle_proposer.py: for method mtp, self.model = "
    "ACLGraphWrapper(self.model, ...)) and _propose (_update_full_graph_params_if_needed after run_draft())",
    "in full graphs each draft forward attends with its own step's parameters, updated before it runs",
    "an MTP draft in full graphs captures one graph per size around the draft model, which each of "
    "_run_merged_draft's K forwards replays, and the graph's attention parameters are updated once, after the "
    "whole draft; the captured attention task waits on its ExternalEvent and resets it at each replay, so the "
    "second step's replay waits on an event the call records once (read so, on an NPU it waits until a later "
    "call's update, or for ever; the simulator's graphs refuse the replay: GraphError), and attends with one "
    "update's parameters whenever it runs. vllm-ascend #7033 (mtp_proposer, which updated after each step's "
    "replay, deleted) brought it; #6860 captures the merged draft for mtp (v0.20.2rc on). Needs K >= 2 and "
    "synchronous scheduling (v0.18.0 drafts MTP eagerly under asynchronous). A crash: sidestepped as that fix "
    "does, the merged draft captured, everywhere but the pin (crashes.sidestepped), which runs it",
    "test_graphs.py::test_an_mtp_draft_in_full_graphs_replays_where_its_known_defect_says",
    kind=Kind.DEFECT,
)
UNIFORM_DECODE_ONLY = DIVERGENCES["full-graphs-uniform-decode-only"]
V0_18 = {
    **V0_20,
    MTP_MODEL_GRAPH.id: MTP_MODEL_GRAPH,
    SFA_GRAPH_STEPS.id: dataclasses.replace(
        MAIN[SFA_GRAPH_STEPS.id],
        impl=SFA_GRAPH_STEPS.impl.replace(
            "at the first pass's row i's position,",
            "at the first pass's row i's position and reads the first pass's query offsets and key lengths "
            "(v0.18.0 reaches a replay only where its MTP draft's whole merged draft is captured: the sidestep "
            "of mtp-draft-steps-replay-one-model-graph; as it is, it crashes first),",
        ),
    ),
    UNIFORM_DECODE_ONLY.id: dataclasses.replace(
        UNIFORM_DECODE_ONLY,
        impl=UNIFORM_DECODE_ONLY.impl.replace(
            "runs eagerly at its own row count",
            "runs eagerly, at the rows of the captured size that holds it (v0.18.0's _propose pads to "
            "_bs_to_padded_graph_size before it dispatches)",
        ),
        rule={**UNIFORM_DECODE_ONLY.rule, "eager_batches_padded": True},
    ),
}
REDUCE_SAMPLE_DEFECTS = (  # the defects of reduce sampling, in some generation or other
    "reduce-sample-ids-of-a-short-last-shard",
    "reduce-sample-top-k-of-the-requests-under-a-slice",
    "reduce-sample-top-k-of-a-slice-or-more-dropped",
    "reduce-sample-random-without-a-top-k-raises",
    "eagle-reduce-sample-reads-a-logits-processor-its-draft-lacks",
    "eagle-reduce-sample-drafts-each-ranks-own-argmax",
    "mtp-reduce-sample-gathers-a-short-last-shard",
)
DRAFT_MODEL_DEFECTS = (
    "draft-model-graph-block-table-of-padded-requests",
    "draft-model-graph-seq-lens-of-the-target",
    DRAFT_MODEL_QUERY_STARTS.id,
)
# A generation -> (what it has otherwise or besides, what of 0.23.0's it has not): v0.21.0rc and v0.22.1rc's
# EAGLE-1 drafter takes another branch (EAGLE_OWN_COLUMNS) than the one that raises on 0.23.0; v0.21.0rc's
# SFA builder rotates every build through the global buffer, so its graph steps read what eager ones do;
# v0.20.2rc's reduce sampling keeps a top-k over the whole vocabulary it scatters its candidates into.
# v0.18.0's: v0.20.2rc's, with its MTP draft captured per model forward (MTP_MODEL_GRAPH), every batch padded
# before dispatch, its SFA graph steps as main's; vLLM 0.18's step 1, which looks the backup token up at seq_len;
# kernels that clamp the predecessor index; no reduce sampling.
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
        V0_18,
        (
            "backup-token",
            "rejection-kernels-read-before-their-buffer",  # its kernels clamp the index: tl.maximum(offset - 1, 0)
            *REDUCE_SAMPLE_DEFECTS,  # it has no reduce sampling (LACKS_OWN)
            *DRAFT_MODEL_DEFECTS,  # its draft-model drafter is not driven (LACKS_OWN)
        ),
    ),
}


# What a generation lacks or does that the harness does not drive: vLLM 0.18 (releases/v0.18.0) corrects
# the next step of asynchronous scheduling in its _update_states, on the host, from the request states the
# scheduler hands it (the harness models the device-side correction of vLLM 0.21 on); v0.18.0 has no reduce
# sampling.
LACKS_OWN = {
    "0.18.0": {
        Feature.ASYNC_SCHEDULING: Skip(
            "vLLM 0.18 corrects an asynchronous step's counts in GPUModelRunner._update_states (host request "
            "states), which the harness does not drive; it drives the device-side correction of vLLM 0.21 on"
        ),
        Feature.REDUCE_SAMPLE: Skip(
            "releases/v0.18.0 has no reduce sampling (no enable_reduce_sample in its AscendConfig)"
        ),
        Feature.DRAFT_MODEL: Skip(
            "releases/v0.18.0's draft-model drafter lays its first pass out without the copy-and-expand op the "
            "adapter stands in for (npu_copy_and_expand_eagle_inputs): not driven"
        ),
    },
}

# v0.18.0's padded path reads the host in its base class's file (eagle_proposer.py), and at step 1 too.
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


@functools.cache
def in_force(generation: str) -> SimpleNamespace:
    """The divergences module's face (``sim.impls.kit.factory``) for ``generation`` (``generation.name``:
    ``0.18.0`` to ``0.23.0``, or ``main``): the entries as that generation has them, and the rules that model them.
    Made once per generation: the adapter asks it on every drafter call (``crashes.sidestepped``), and its
    readers copy what they keep."""
    besides, lacking = OWN.get(generation, ({}, ()))
    kept = {i: d for i, d in {**DIVERGENCES, **besides}.items() if i not in lacking}
    reads = HOST_READS_0_18 if generation == "0.18.0" else HOST_READS
    lacks = {**LACKS, **LACKS_OWN.get(generation, {}), **scheduler_lacks.lacks()}
    return SimpleNamespace(DIVERGENCES=kept, RULES=rules_of(kept.values()), LACKS=lacks, HOST_READS=reads)
