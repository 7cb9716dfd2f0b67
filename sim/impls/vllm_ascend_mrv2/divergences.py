"""Where vllm-ascend's MRV2 MTP speculator differs from the core, by design or by defect: the one table.

docs/DIVERGENCES-vllm-ascend-mrv2.md explains each entry (what it does to drafts and to KV);
tests/impls/vllm_ascend_mrv2/ pins each one. The first five are vLLM's MRV2 loop, inherited as they
are in vLLM 0.33 (``sim.impls.kit.mrv2_loop``, same ids); the rest are vllm-ascend's host
lengths, what its attention backends read, and its rejection sampler; three of those belong to some
generations only (``GENERATION``): ``in_force`` is the table of the generation installed.
"""

from __future__ import annotations

from types import SimpleNamespace

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, rules_of, table
from sim.impls.features import Feature
from sim.impls.kit import mrv2_loop, tables
from sim.impls.vllm_ascend_mrv2 import graphs
from sim.impls.vllm_ascend_mrv2.generation import picks_handling_by_family

INHERITED = (
    "overflow-clamp",
    "stale-rejected-rows",
    "no-unpadded-path",
    "unfiltered-last-sampled",
    "unsampled-row-rejected",
)
PIN = {
    "overflow-clamp": "test_steps.py::test_overflow_clamp_divergence",
    "stale-rejected-rows": "test_prepare.py::test_stale_rejected_rows_divergence",
    "no-unpadded-path": "test_prepare.py::test_unpadded_runs_the_padded_path",
    "unfiltered-last-sampled": "test_step_one.py::test_last_sampled_is_taken_unfiltered",
    "unsampled-row-rejected": "test_step_one.py::test_a_request_that_sampled_nothing_rejects_its_last_row",
}


def _inherited(divergence_id: str, **changes) -> Divergence:
    """The MRV2 loop's entry, pinned in this adapter's suite (``changes``: where vllm-ascend's differs)."""
    d = mrv2_loop.LOOP[divergence_id]
    fields = {"where": d.where, "core": d.core, "impl": d.impl, "rule": d.rule, **changes}
    return Divergence(divergence_id, fields["where"], fields["core"], fields["impl"], PIN[divergence_id],
                      kind=d.kind, rule=fields["rule"])  # fmt: skip


# The draft attention families whose kernels read each step's host lengths (the FIA kernel's seq_lens_list, MLA's
# decode part's): an SFA draft's kernels read the device lengths, which vLLM's MRV2 kernels lower by the rejected
# drafts and advance each step (its builder keeps the per-step state: main's speculator leaves SFA to it)
HOST_LIST_FAMILIES = ("gqa", "mla")

DIVERGENCES = table(
    _inherited(
        "overflow-clamp",
        impl="position min(p + 1, max_model_len - 1) and the slot of that clamped position (the kernels'); "
        "the host length attention reads is clamped at max_model_len too (_calc_next_seq_lens_cpu, "
        "draft_max_seq_len): every overflowing (garbage) draft writes KV into the request's slot of position "
        "max_model_len - 1, over the KV the step before wrote there",
        rule={"overflow_position": "clamp", "overflow_seq_len": "clamp"},
    ),
    _inherited("stale-rejected-rows"),
    _inherited("no-unpadded-path"),
    _inherited("unfiltered-last-sampled"),
    _inherited("unsampled-row-rejected"),
    Divergence(
        "host-seq-lens-not-lowered",
        "_calc_next_seq_lens_cpu (0.23.0); AutoRegressiveSpeculator.propose's draft_max_seq_len (main)",
        "steps 2..K attend to the accepted prefix: seq_len - n_rej + j - 1",
        "the host lengths the attention reads advance from the runner's host seq_lens (0.23.0: seq_lens_np; "
        "main: the bound seq_lens_cpu_upper_bound), the target's seq_len, never lowered by num_rejected "
        "(vllm-ascend's NOTE: 'to avoid extra sync overhead'); vLLM's kernel lowers only the device "
        "seq_lens, which the Ascend kernels do not read: step j attends to the n_rej rejected rows' KV, "
        "written by the first pass from stale ids and positions (stale-rejected-rows); an SFA draft's "
        "kernels read the device lengths (HOST_LIST_FAMILIES)",
        "test_steps.py::test_host_seq_lens_not_lowered",
        kind=Kind.DEFECT,
        rule={"padded_seq_lens_lowered": False},
        families=HOST_LIST_FAMILIES,
    ),
    Divergence(
        "host-seq-lens-advanced-twice",
        "AscendEagleSpeculator._generate_draft (0.23.0)",
        "step j attends with base + j - 1",
        "_ascend_prepare_decode_draft raises the runner's seq_lens_np by one before each step's forward "
        "(the metadata's seq_lens_cpu aliases it) and _increment_decode_attn_metadata again after it: "
        "step j attends with min(base + 2j - 3, max_model_len), j - 2 keys past its context from step 3 on",
        "test_steps.py::test_host_seq_lens_advanced_twice",
        kind=Kind.DEFECT,
        rule={"step_seq_lens": "advance-twice"},
    ),
    Divergence(
        "draft-seq-lens-batch-bound",
        "AscendAutoRegressiveSpeculator._generate_draft (main)",
        "step j attends with base + j - 1",
        "the step's metadata is built by vllm-ascend's build_attn_metadata with no seq_lens_np, so its "
        "host lengths are draft_max_seq_len for every request (min(max seq_len + K, max_model_len), the max "
        "over the runner's host lengths: not lowered while host-seq-lens-not-lowered stands); "
        "_update_decode_attn_metadata writes the per-request lengths only after the forward, into "
        "metadata the next step rebuilds: every request attends to the batch's bound at every step; an SFA "
        "draft's kernels read the device lengths (HOST_LIST_FAMILIES); steps replayed from the full decode "
        "graph read what run_fullgraph updates its tasks with, build_draft_attn_metadatas' per-request "
        "lengths (seq_lens_np + step): eager steps only",
        "test_steps.py::test_draft_seq_lens_batch_bound",
        kind=Kind.DEFECT,
        rule={"step_seq_lens": "batch-bound", "step_seq_lens_in_graphs": "advance"},
        families=HOST_LIST_FAMILIES,
    ),
    Divergence(
        "random-drafts-always-accepted",
        "_probabilistic_rejection_kernel (worker/v2/spec_decode/rejection_sampler_utils.py, 0.23.0 and v0.26.0rc)",
        "a random request keeps draft i with probability min(1, q(d_i) / p(d_i)) and replaces the first "
        "rejected one by a draw from max(q - p, 0): its first output id is distributed as the target's q",
        "the acceptance test draws no uniform ('NPU does not support tl_rand64; always accept the draft "
        "token': u = 0, log u = -inf), so every random request keeps all its drafts and then the bonus "
        "token: the output follows the drafter's distribution, not the target's, and the acceptance rate "
        "reads 1.0 (vllm-ascend #13470, fixed on main by drawing u with tl.rand)",
        "test_rejection_sampler.py::test_random_first_ids_follow_the_target_distribution",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "dummy-run-seq-lens-of-its-requests",
        "AscendInputBatch.make_dummy (worker/v2/input_batch.py: seq_lens_np = input_buffers.seq_lens_np[:num_reqs]), "
        "read by AscendAutoRegressiveSpeculator._update_decode_attn_metadata through run_fullgraph (main)",
        "a dummy run replays the decode graph its peers replay, the padded rows' host lengths 0",
        "a real batch hands the speculator the runner's whole seq_lens_np buffer, the dummy batch its own requests' "
        "lengths only; the decode graph replays at its captured request count (capture sizes rounded up to 1 + K), "
        "and build_draft_attn_metadatas copies seq_lens_np[:num_reqs_padded] into each step's padded seq_lens_cpu: "
        "an idle DP rank's dummy of 2 up to the padded count less one requests raises (a size mismatch), one of 1 "
        "request hands the attention task one key length for the padded rows (which the simulator's FIA refuses). "
        "A crash: sidestepped (the dummy batch handed the whole buffer, as a real batch is) everywhere but the pin "
        "(crashes.sidestepped); read on v0.26.0rc and v0.25.1rc (the same lines), not run",
        "test_graphs.py::test_a_dummy_run_of_fewer_requests_than_its_graph_crashes_where_its_known_defect_says",
        kind=Kind.DEFECT,
    ),
    Divergence(
        "dummy-run-draft-steps-write-the-rows-last-blocks",
        "vLLM's AutoRegressiveSpeculator._multi_step_decode on a dummy batch (BlockTables.compute_slot_mappings "
        "reads the staged tables through idx_mapping, make_dummy's arange), run by vllm-ascend's decode graph (main)",
        "a dummy run writes no KV: its batch's slots are padding (get_dummy_slot_mappings), its tables zeroed rows",
        "the runner zeroes the dummy's input block tables and hands the first pass padding slots, but each draft "
        "step computes its slots from the staged table's rows 0..n-1 (the request states a dummy's arange maps to), "
        "which hold the blocks of the requests last in those rows: the dummy's draft forwards write draft KV into "
        "them (on an idle DP rank, blocks of finished requests: a prefix-cache hit on one later reads that KV). "
        "Eager dispatch computes them so too (read; the adapter's dummy run is a full-graph one). Tolerated exactly "
        "at the blocks of those rows (dummy_kv.writes_no_kv), any other write fails",
        "test_graphs.py::test_a_dummy_run_after_a_call_writes_where_its_known_defect_says",
        kind=Kind.DEFECT,
    ),
)
DUMMY_SEQ_LENS = DIVERGENCES["dummy-run-seq-lens-of-its-requests"]
DUMMY_WRITES_KV = DIVERGENCES["dummy-run-draft-steps-write-the-rows-last-blocks"]

# The generation-only entries: the generations whose speculator has the divergence (``generation``).
GENERATION = {
    "host-seq-lens-advanced-twice": ("0.23.0",),
    "random-drafts-always-accepted": ("0.23.0", "0.26.0"),
    "draft-seq-lens-batch-bound": ("main", "0.26.0"),
    "dummy-run-seq-lens-of-its-requests": ("main",),
    "dummy-run-draft-steps-write-the-rows-last-blocks": ("main",),
}

HOST_LISTS = tables.host_copies(
    "vllm-ascend's MRV2 speculator",
    "the runner's seq_lens_np and the metadata's seq_lens / seq_lens_cpu, read back as seq_lens_list by "
    "_update_decode_attn_metadata and _ascend_update_seq_lens",
)

# What it cannot run (sim.impls.features): a property using one is skipped with this reason.
# Its graphs: full ones where the checkout deploys vllm-ascend's graph manager (``graphs.lacks``, ``in_force``), for one
# draft attention group of any family; piecewise ones never (they compile a vLLM draft model class: the tiny model
# here, nothing to compile).
LACKS = tables.lacks(
    "the vllm-ascend MRV2 adapter's piecewise graphs would come from torch.compile of a vLLM draft model class; the "
    "draft model here is the simulator's tiny model, nothing to compile",
    host_sync=HOST_LISTS,
    more={
        **mrv2_loop.NO_UNPADDED,
        Feature.DRAFT_MODEL: Skip(
            "vllm-ascend's MRV2 init_speculator builds no speculator for method draft_model: it raises "
            "NotImplementedError (0.23.0's and main's, read)"
        ),
    },
    has=(
        Feature.EAGLE,
        Feature.EAGLE3,
        Feature.MLA_DRAFT,
        Feature.SFA_DRAFT,
        Feature.DRAFT_ATTN_GROUPS,
        Feature.KERNEL_BLOCKS,
        Feature.ASYNC_SCHEDULING,
        Feature.RUNNER_SAMPLES,
    ),  # fmt: skip
)
FULL_GRAPHS_ONE_GROUP = (
    "the MRV2 adapter's full graphs draft with one attention group: a second group's task is not captured "
    "(main's run_fullgraph updates the first backend's tasks only, FIXME: support hybrid attn backend)"
)
# What full graphs lack where they are driven (main)
FULL_LACKS = {
    Feature.DUMMY_RUN: Skip(
        "the MRV2 runner's dummy run (its speculator's propose with dummy_run=True on a dummy batch) is not driven: "
        "the adapter serves one rank's calls"
    ),
}
# A speculator with one per-step metadata handling, the flat one (0.23.0's; main's picks it by the draft layer's
# backend: generation.picks_handling_by_family)
FLAT_ONLY = {
    Feature.MLA_DRAFT: Skip(
        "this MRV2 speculator updates each draft step's flat AscendMetadata lists only (no attn_architecture): "
        "an MLA draft layer's decode part is main's (0.23.0: read, not run)"
    ),
    Feature.SFA_DRAFT: Skip(
        "this MRV2 speculator has no SFA handling (no attn_architecture; 0.23.0's build_attn_metadata hands the SFA "
        "builder no num_input_tokens, whose first build raises TypeError: run); main's leaves an SFA draft's "
        "per-step state to the builder"
    ),
}


def in_force(generation: str) -> SimpleNamespace:
    """The divergences module's face (``sim.impls.kit.factory``) for ``generation`` (``0.23.0``, ``0.26.0``
    or ``main``): its entries only, and the rules that model them."""
    kept = {i: d for i, d in DIVERGENCES.items() if generation in GENERATION.get(i, (generation,))}
    lacks = LACKS if picks_handling_by_family() else {**LACKS, **FLAT_ONLY}
    full = graphs.lacks()
    if full is None:
        lacks = {f: skip for f, skip in lacks.items() if f is not Feature.FULL_GRAPHS}
    else:
        lacks = {**lacks, Feature.FULL_GRAPHS: Skip(full)}
    return SimpleNamespace(DIVERGENCES=kept, RULES=rules_of(kept.values()), LACKS=lacks)


RULES = rules_of(d for i, d in DIVERGENCES.items() if i not in GENERATION)  # the entries of both generations
