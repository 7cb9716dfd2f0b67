"""Where vllm-ascend 0.13.0's ``MtpProposer`` differs from the core, by design or by defect: the one table.

docs/DIVERGENCES-vllm-ascend-0.13.md explains each entry (what it does to drafts and KV);
tests/impls/vllm_ascend_0_13/ pins each one (the test named in ``pinned_by`` asserts the difference
exists, exactly where the entry says). The first four are the 0.13-era proposer's defects (docs/DESIGN.md);
``RULES`` models them in the reference so the gate's properties run on 0.13.
"""

from __future__ import annotations

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, rules_of, table
from sim.impls.features import Feature
from sim.impls.kit import tables

DIVERGENCES = table(
    Divergence(
        "slot-plus-one",
        "MtpProposer._propose (the step loop)",
        "step j's slot = block_table[r][pos // block_size] * block_size + pos % block_size",
        "step j's slot = the last accepted token's slot + (j - 1) (slot_mapping += 1): wrong once a draft "
        "position crosses into a block that is not the physically next one",
        "test_seed_defects.py::test_slot_plus_one_across_blocks",
        kind=Kind.DEFECT,
        rule={"slots_from_block_table": False},
    ),
    Divergence(
        "padded-seq-lens-not-lowered",
        "prepare_inputs_padded + MtpProposer._propose",
        "steps 2..K attend to (seq_len - n_rej) + j - 1 keys",
        "padded mode never lowers seq_lens (the MLA builder takes seq_lens_cpu as given): step j attends to "
        "seq_len + j - 1, the rejected tokens' KV among them",
        "test_seed_defects.py::test_padded_seq_lens_not_lowered",
        kind=Kind.DEFECT,
        rule={"padded_seq_lens_lowered": False},
    ),
    Divergence(
        "unpadded-max-query-len",
        "prepare_inputs",
        "max_query_len of the compacted batch",
        "max_query_len of the original query lengths (an upper bound); the MLA builder reads it only to "
        "decide whether any request is a prefill, so drafts do not change",
        "test_seed_defects.py::test_max_query_len_from_old_lengths",
        kind=Kind.DEFECT,
        rule={"max_query_len_compacted": False},
    ),
    Divergence(
        "mrope-positions",
        "MtpProposer._propose",
        "M-RoPE positions [3, T] go to the M-RoPE buffer",
        "self.positions[:num_tokens] = target_positions: a [3, T] tensor into the 1-D positions buffer "
        "(mrope_positions, allocated by vLLM's EagleProposer, is never written); it raises",
        "test_seed_defects.py::test_mrope_positions_written_to_positions",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "overflow-position-restart",
        "MtpProposer._propose (the step loop)",
        "every step whose position reaches max_model_len: position 0, seq_len 1, slot -1",
        "the first such step: position 0, slot -1; the next steps read the clamped position back from the "
        "positions buffer and continue at 1, 2, ..., and the slot continues from -1: 0, 1, ... (physical "
        "slots of block 0, owned by whichever request holds it); seq_len restarts at 1 on its own once past "
        "max_model_len",
        "test_steps.py::test_overflow_position_restart",
        kind=Kind.DEFECT,
        rule={"overflow_position": "restart", "overflow_seq_len": "own-restart"},
    ),
    Divergence(
        "prefill-batch-drafts-once",
        "MtpProposer._propose (with_prefill)",
        "every request gets K drafts from K steps",
        "when the runner's batch has a prefill (attention state neither DecodeOnly nor SpecDecoding), one "
        "step runs and draft 1 is returned K times",
        "test_propose.py::test_prefill_batch_repeats_draft_one",
        kind=Kind.DEFECT,
        rule={"prefill_batches_draft_once": True},
    ),
    Divergence(
        "stale-last-row",
        "MtpProposer._propose (input shift)",
        "the batch's last row keeps its own id when it is not a sample row",
        "that row is never written: it keeps the buffer's old value (padded, last request rejected a draft)",
        "test_prepare.py::test_stale_last_row_divergence",
        kind=Kind.DESIGN,
        rule={"stale_last_row": True},
    ),
    Divergence(
        "mtp-steps-run-padded-rows",
        "MtpProposer._propose",
        "steps 2..K run one row per request",
        "steps 2..K run at the first pass's row count; rows past B hold stale inputs and slot -1",
        "test_propose.py::test_steps_run_at_first_pass_rows",
        kind=Kind.DESIGN,
        rule={"steps_run_first_pass_rows": True},
    ),
    Divergence(
        "slot-mapping-in-place",
        "prepare_inputs; MtpProposer._propose",
        "the caller's batch is never written",
        "prepare_inputs compacts the caller's slot_mapping (-1 tail); _propose fills the first pass's "
        "slot_mapping (a view of the caller's) with -1 after the first step",
        "test_prepare.py::test_caller_slot_mapping_rewritten",
        kind=Kind.DESIGN,
    ),
)

# The divergences the reference models (sim.oracle.rules), so the gate's properties run on 0.13.
RULES = rules_of(DIVERGENCES.values())

# What it cannot run (sim.impls.features): a property using one is skipped with this reason.
# vLLM 0.13's Scheduler (the one vllm-ascend 0.13.0 serves with) gives a request's first scheduling no lookahead
# slots (``effective_lookahead_tokens = 0 if request.num_computed_tokens == 0``, meant for P/D KV loads): the drafts
# of its first call run past the blocks it was given. vLLM limits that to asynchronous KV loads by 0.23.
FIRST_SCHEDULING_WITHOUT_LOOKAHEAD = Skip(
    "vLLM 0.13's Scheduler gives a request's first scheduling no lookahead slots (Scheduler.schedule: "
    "effective_lookahead_tokens = 0 while num_computed_tokens == 0), so the drafts of its first call run past "
    "its blocks, where the harness stops the run (SchedulerDefect); "
    "vLLM limits it to asynchronous KV loads from 0.23 on (test_scheduled_by_vllm.py pins it)"
)
LACKS = tables.lacks(
    "the vllm-ascend 0.13 adapter runs eagerly only (ACL graphs need an NPU)",
    tables.host_copies(
        "vllm-ascend 0.13",
        "prepare_next_token_ids_padded: seq_lens_cpu[i].item(); prepare_inputs_padded: query_start_loc_cpu[-1].item(); "
        "_propose: seq_lens.tolist()",
    ),
    more={Feature.VLLM_SCHEDULER: FIRST_SCHEDULING_WITHOUT_LOOKAHEAD},
)
