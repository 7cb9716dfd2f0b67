"""A broken vllm-ascend MRV2 speculator under the whole gate: ``-p tests.impls.vllm_ascend_mrv2.broken_gate``
with ``MTP_BROKEN_VLLM_ASCEND_MRV2=NAME`` applies the break ``NAME`` for the session (and in every xdist
worker), as a pull request carrying that regression would. ``benchmarks/time_to_failure.py --impl
vllm_ascend_mrv2`` runs the gate once per variant and times its first failure.

Each break is of the code under test: vLLM's MRV2 kernels' wrappers and ``BlockTables`` (what
vllm-ascend's speculator runs) or vllm-ascend's own host-length update.
"""

from __future__ import annotations

import functools

import pytest

from tests.impls.fixes import session_plugin
from tests.impls.vllm_ascend_mrv2 import defect_fixes

ENV = "MTP_BROKEN_VLLM_ASCEND_MRV2"
AR = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"


def positions_not_advanced(update_draft_inputs):
    """``update_draft_inputs`` whose step leaves the positions as they were: steps 3..K repeat step 2's
    position (and slot)."""

    @functools.wraps(update_draft_inputs)
    def broken(draft_tokens, current_draft_step, hidden_states, output_draft_tokens, next_input_hidden_states,
               input_buffers, num_reqs, *args, **kwargs):  # fmt: skip
        before = input_buffers.positions[:num_reqs].clone()
        update_draft_inputs(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, num_reqs, *args, **kwargs)  # fmt: skip
        input_buffers.positions[:num_reqs] = before

    return broken


def slots_one_position_back(compute_slot_mappings):
    """``BlockTables.compute_slot_mappings`` told each position minus one: every step writes its KV at the
    slot of the position before (over the previous step's, or the last accepted token's)."""

    @functools.wraps(compute_slot_mappings)
    def broken(self, idx_mapping, query_start_loc, positions, *args, **kwargs):
        return compute_slot_mappings(self, idx_mapping, query_start_loc, positions - 1, *args, **kwargs)

    return broken


def host_seq_lens_not_advanced(calc_next_seq_lens_cpu):
    """0.23.0's ``_calc_next_seq_lens_cpu`` that does not add the step: the host lengths the attention
    reads stay at the target's seq_len (0.23.0 writes them before the forward; main only after it,
    where nothing reads them, so there the break changes nothing)."""

    @functools.wraps(calc_next_seq_lens_cpu)
    def broken(self, seq_lens_cpu, num_reqs, num_reqs_padded, step):
        return calc_next_seq_lens_cpu(self, seq_lens_cpu, num_reqs, num_reqs_padded, 0)

    return broken


# name -> (where: "module" (the AR speculator module) or "block-tables" or "speculator", the attribute, the
# break, the generation it applies to or None for both)
VARIANTS = {
    "positions-not-advanced": ("module", "update_draft_inputs", positions_not_advanced, None),
    "slots-one-position-back": ("block-tables", "compute_slot_mappings", slots_one_position_back, None),
    "host-seq-lens-not-advanced": ("speculator", "_calc_next_seq_lens_cpu", host_seq_lens_not_advanced, "0.23.0"),
}


# name -> (the known defect it fixes, the speculator's method, the fix, the generation): vllm-ascend's
# speculator with a known defect fixed (``defect_fixes``); the whole gate must end with the one line
# "fixed: ID no longer present; drop it from the list", and pass with the id dropped (--divergences).
FIXES = {
    "advanced-once": ("host-seq-lens-advanced-twice", "_generate_draft", defect_fixes.advanced_once, "0.23.0"),
    "host-seq-lens-lowered": ("host-seq-lens-not-lowered", "propose", defect_fixes.host_seq_lens_lowered, "0.23.0"),
}


def variants() -> list[str]:
    """The variants that apply to the generation installed."""
    from sim.impls.vllm_ascend_mrv2 import generation

    return [name for name, (*_, gen) in VARIANTS.items() if gen in (None, generation.name())]


def apply(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Change vllm-ascend's MRV2 speculator as the variant (``VARIANTS``) or fix (``FIXES``) ``name`` says."""
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend_mrv2 import generation

    if name in FIXES:
        _, method, fixing, gen = FIXES[name]
        if gen != generation.name():
            raise pytest.UsageError(f"{ENV}={name!r}: applies to vllm-ascend {gen}, not {generation.name()}")
        cls = generation.speculator_class()
        monkeypatch.setattr(cls, method, fixing(getattr(cls, method)))
        return
    if name not in VARIANTS:
        known = ", ".join([*VARIANTS, *FIXES])
        raise pytest.UsageError(f"{ENV}={name!r}: not a changed vllm-ascend MRV2; known: {known}")
    where, attribute, breaking, _ = VARIANTS[name]
    if name not in variants():
        raise pytest.UsageError(f"{ENV}={name!r}: applies to vllm-ascend {VARIANTS[name][3]}, not {generation.name()}")
    owner = {
        "module": lambda: import_ascend(AR),
        "block-tables": lambda: import_ascend("vllm.v1.worker.gpu.block_table").BlockTables,
        "speculator": generation.speculator_class,
    }[where]()
    monkeypatch.setattr(owner, attribute, breaking(getattr(owner, attribute)))


pytest_configure = session_plugin(ENV, lambda name, monkeypatch: apply(name, monkeypatch))
