"""A broken vllm-ascend MRV2 speculator under the whole gate: ``-p tests.impls.vllm_ascend_mrv2.broken_gate``
with ``MTP_BROKEN_VLLM_ASCEND_MRV2=NAME`` applies the break ``NAME`` for the session (and in every xdist
worker), as a pull request carrying that regression would. ``benchmarks/time_to_failure.py --impl
vllm_ascend_mrv2`` runs the gate once per variant and times its first failure.

The breaks are ``speculator_breaks``'s and ``sampling_breaks``'s, each of the code under test.
"""

from __future__ import annotations

import pytest

from tests.impls.fixes import session_plugin
from tests.impls.vllm_ascend_mrv2 import defect_fixes, sampling_breaks
from tests.impls.vllm_ascend_mrv2 import speculator_breaks as breaks

ENV = "MTP_BROKEN_VLLM_ASCEND_MRV2"
AR = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"
ASCEND_AR = "vllm_ascend.worker.v2.spec_decode.autoregressive.speculator"  # main's shared speculator

# name -> (where: "module" (vLLM's AR speculator module), "ascend-module" (vllm-ascend's, main), "block-tables",
# "speculator", "runner" (vllm-ascend's MRV2 model runner), "vllm-runner" (vLLM's, which it inherits sampling from),
# "async-output" (vLLM's MRV2 asynchronous output), "input-batch" (vLLM's MRV2 input kernels' module),
# "builder" or "sfa-builder" (the checkout's attention
# metadata builders), the attribute, the break,
# the speculator it applies to (generation.speculator_name) or None for both)
VARIANTS = {
    "positions-not-advanced": ("module", "update_draft_inputs", breaks.positions_not_advanced, None),
    "request-states-of-the-batch-rows": (
        "module",
        "prepare_prefill_inputs",
        breaks.request_states_of_the_batch_rows,
        None,
    ),
    "host-lengths-read-before-their-event": (
        "runner",
        "_update_seq_lens_cpu",
        breaks.host_lengths_read_before_their_event,
        None,
    ),
    "host-lengths-of-the-batch-rows": ("runner", "_update_seq_lens_cpu", breaks.host_lengths_of_the_batch_rows, None),
    "host-counts-copied-before-the-postprocess": (
        "runner",
        "postprocess_sampled",
        breaks.host_counts_copied_before_the_postprocess,
        None,
    ),
    "next-step-drafts-of-the-batch-rows": (
        "input-batch",
        "combine_sampled_and_draft_tokens",
        breaks.next_step_drafts_of_the_batch_rows,
        None,
    ),
    "output-copied-before-the-sampler-finishes": (
        "async-output",
        "__init__",
        sampling_breaks.output_copied_before_the_sampler_finishes,
        None,
    ),
    "drafts-kept-at-the-batch-rows": (
        "vllm-runner",
        "sample_tokens",
        sampling_breaks.drafts_kept_at_the_batch_rows,
        None,
    ),
    "reported-sampled-tokens-one-short": (
        "async-output",
        "get_output",
        sampling_breaks.reported_sampled_tokens_one_short,
        None,
    ),
    "slots-one-position-back": ("block-tables", "compute_slot_mappings", breaks.slots_one_position_back, None),
    "kernel-blocks-one-further-on": ("block-tables", "append_block_ids", breaks.kernel_blocks_one_further_on, None),
    "kernel-slots-by-the-block-size": (
        "block-tables",
        "init_block_table_layout_tensors",
        breaks.kernel_slots_by_the_block_size,
        None,
    ),
    "host-seq-lens-not-advanced": (
        "speculator",
        "_calc_next_seq_lens_cpu",
        breaks.host_seq_lens_not_advanced,
        "0.23.0",
    ),
    "decode-steps-labelled-prefill-no-cache": (
        "speculator",
        "_init_decode_attn_metadata",
        breaks.decode_steps_labelled_prefill_no_cache,
        "0.23.0",
    ),
    "draft-steps-labelled-prefill-no-cache": (
        "speculator",
        "_build_draft_attn_metadata",
        breaks.decode_steps_labelled_prefill_no_cache,
        "main",
    ),
    "builder-query-starts-as-ends": ("builder", "build", breaks.query_starts_as_ends, None),
    "sfa-builder-keys-one-short": ("sfa-builder", "_build", breaks.sfa_keys_one_short, "main"),
    "draft-rope-of-the-step-before": (
        "ascend-module",
        "build_draft_attn_metadata_factory",
        breaks.draft_rope_of_the_step_before,
        "main",
    ),
    "graph-steps-share-the-first-steps-lengths": (
        "speculator",
        "build_draft_attn_metadatas",
        breaks.graph_steps_share_the_first_steps_lengths,
        "main",
    ),
}


# name -> (the known defect it fixes, the speculator's method, the fix, the speculator or None for both): vllm-ascend's
# speculator with a known defect fixed (``defect_fixes``); the whole gate must end with the one line
# "fixed: ID no longer present; drop it from the list", and pass with the id dropped (--divergences).
FIXES = {
    "advanced-once": ("host-seq-lens-advanced-twice", "_generate_draft", defect_fixes.advanced_once, "0.23.0"),
    "host-seq-lens-lowered": ("host-seq-lens-not-lowered", "propose", defect_fixes.host_seq_lens_lowered, None),
}


def variants() -> list[str]:
    """The variants that apply to the checkout installed: of its speculator's generation, where it has what they
    change (a release branch between 0.23.0 and main may lack a function main has)."""
    from sim.impls.vllm_ascend_mrv2 import generation

    mine = [(name, v) for name, v in VARIANTS.items() if v[3] in (None, generation.speculator_name())]
    return [name for name, (where, attribute, *_) in mine if hasattr(owner(where), attribute)]


def owner(where: str):
    """What a variant's ``where`` names, in the checkout installed."""
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend_mrv2 import generation, host_lengths

    return {
        "module": lambda: import_ascend(AR),
        "block-tables": lambda: import_ascend("vllm.v1.worker.gpu.block_table").BlockTables,
        "speculator": generation.speculator_class,
        "runner": lambda: import_ascend(host_lengths.RUNNER).NPUModelRunner,
        "vllm-runner": lambda: import_ascend("vllm.v1.worker.gpu.model_runner").GPUModelRunner,
        "async-output": lambda: import_ascend("vllm.v1.worker.gpu.async_utils").AsyncOutput,
        "input-batch": lambda: import_ascend("vllm.v1.worker.gpu.input_batch"),
        "builder": lambda: import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionMetadataBuilder,
        "sfa-builder": lambda: import_ascend("vllm_ascend.attention.sfa_v1").AscendSFAMetadataBuilder,
        "ascend-module": lambda: import_ascend(ASCEND_AR),
    }[where]()


def apply(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change vllm-ascend's MRV2 speculator as the variant (``VARIANTS``) or fix (``FIXES``) ``name`` says."""
    from sim.impls.vllm_ascend_mrv2 import generation

    if name in FIXES:
        _, method, fixing, gen = FIXES[name]
        if gen not in (None, generation.speculator_name()):
            raise pytest.UsageError(f"{ENV}={name!r}: applies to vllm-ascend {gen}, not {generation.speculator_name()}")
        cls = generation.speculator_class()
        monkeypatch.setattr(cls, method, fixing(getattr(cls, method)))
        return
    if name not in VARIANTS:
        known = ", ".join([*VARIANTS, *FIXES])
        raise pytest.UsageError(f"{ENV}={name!r}: not a changed vllm-ascend MRV2; known: {known}")
    where, attribute, breaking, gen = VARIANTS[name]
    if name not in variants():
        raise pytest.UsageError(
            f"{ENV}={name!r}: changes {attribute} of vllm-ascend {gen or 'any'}'s speculator, which this checkout"
            f" ({generation.speculator_name()}) has not"
        )
    changed = owner(where)
    monkeypatch.setattr(changed, attribute, breaking(getattr(changed, attribute)))


pytest_configure = session_plugin(ENV, lambda name, monkeypatch: apply(name, monkeypatch))
