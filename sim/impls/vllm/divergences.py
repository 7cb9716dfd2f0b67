"""Where vLLM 0.33.0's proposer differs from the core, by design: the one table.

docs/DIVERGENCES.md explains each entry; tests/impls/vllm/ pins each one (the test
named in ``pinned_by`` asserts that the difference exists, exactly where the
entry says). A property of the gate that cannot hold for vLLM is skipped under
``--impl vllm`` with the divergence as its reason (``LACKS``).
"""

from __future__ import annotations

from sim.impls.divergence import Divergence, Kind, rules_of, table
from sim.impls.features import Feature
from sim.impls.kit import tables
from sim.impls.kit.host_reads import prepare_inputs_padded_reads

DIVERGENCES = table(
    Divergence(
        "backup-token",
        "prepare_next_token_ids_padded",
        "a request without a valid sampled token continues from its token at seq_len",
        "it continues from get_token_id(num_tokens_no_spec - 1), the last known token "
        "(for a partial prefill: the last prompt token); the unpadded path uses the token at seq_len",
        "test_step_one.py::test_backup_token_divergence",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "overflow-restart",
        "eagle_step_update_slot_mapping_and_metadata",
        "every step whose position base + j - 1 reaches max_model_len gets position 0, seq_len 1, slot -1",
        "the first overflowing step gets 0 / 1 / -1, the next steps continue from it: position 1, 2, ... "
        "with seq_len 2, 3, ... and a real slot in the request's first block (KV written there)",
        "test_steps.py::test_overflow_restart_divergence",
        kind=Kind.DESIGN,
        rule={"overflow_position": "restart", "overflow_seq_len": "with-position"},
    ),
    Divergence(
        "clamps",
        "eagle_step_update_slot_mapping_and_metadata",
        "no clamp: a block table too narrow for the drafts is refused (ValueError) before any work",
        "seq_len is clamped to max_model_len and the block index to the table's last column",
        "test_steps.py::test_clamp_divergence",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "unpadded-no-filter",
        "prepare_next_token_ids_cpu",
        "per-request lists must hold token ids in [0, vocab) (ValueError otherwise)",
        "the last list entry is taken as is: no -1 or vocab filter",
        "test_step_one.py::test_unpadded_lists_are_not_filtered",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "cpu-seq-lens-alias",
        "prepare_inputs",
        "seq_lens (device) and its host copy are distinct",
        "on CPU, seq_lens IS seq_lens_cpu_upper_bound (async_tensor_h2d to cpu returns its input), so "
        "propose() raises it by 2 per step; the adapter clones it (a CPU-only artifact)",
        "test_prepare.py::test_cpu_seq_lens_alias",
        kind=Kind.ARTIFACT,
        devices=("sim",),
    ),
    Divergence(
        "unpadded-max-query-len",
        "prepare_inputs",
        "max_query_len of the compacted batch: max(q_r - n_rej_r)",
        "max_query_len of the original query lengths (an upper bound; the 0.13-era proposer's defect)",
        "test_prepare.py::test_unpadded_max_query_len_divergence",
        kind=Kind.DEFECT,
        rule={"max_query_len_compacted": False},
    ),
    Divergence(
        "stale-last-row",
        "set_inputs_first_pass",
        "the last row of the flattened batch keeps its own id when it is not a sample row",
        "that row is never written: it holds whatever the buffer held (padded mode, the last request "
        "rejected a draft); its output is never sampled and its KV is past every later seq_len",
        "test_prepare.py::test_stale_last_row_divergence",
        kind=Kind.DESIGN,
        rule={"stale_last_row": True},
    ),
    Divergence(
        "seq-lens-in-place",
        "propose",
        "the caller's batch is never written",
        "padded: cad.seq_lens -= num_rejected in place on the caller's metadata, then +1 per step",
        "test_propose.py::test_padded_propose_mutates_caller_seq_lens",
        kind=Kind.DESIGN,
    ),
)


# The divergences the reference models (sim.oracle.rules), so the gate's properties run on vLLM.
RULES = rules_of(DIVERGENCES.values())

# What cannot run at all, by test function name (conftest skips it with this reason).
LACKS = tables.lacks(
    "the vLLM adapter runs eagerly only (its drafter graphs are CUDA graphs)",
    has=(Feature.EAGLE, Feature.EAGLE3, Feature.DRAFT_MODEL),
)

# The padded path's reads of host tensors, named for the sync property (sim.impls.kit.host_reads): on the
# CPU device they look like syncs.
HOST_READS = prepare_inputs_padded_reads("vllm/v1/spec_decode/llm_base_proposer.py")
