"""The gate catches vllm-ascend handing its attention metadata that a backend would read wrong.

Each case breaks one of vllm-ascend's methods (``metadata_breaks``) in what attention
is handed rather than in what the device side holds: a host mirror not advanced with
its device tensor (vllm-ascend #3300), a computed count other than the reference's
(at the first pass, or drifting otherwise than ``num-computed-tokens-drift`` later), a
step's tensor written after its build (cross-step aliasing, vllm-ascend #7549), steps 2..K
built with the first pass's attention state (a state contradicting its batch, #8029's class). Each
must fail the gate under ``--impl vllm_ascend``'s rules by name (the metadata checks of
``sim.impls.kit.metadata_checks`` or the trace comparison: step, field, both values), and
each serving-run case reports the seconds from the start of the search to its first
failing example (``seconds_to_first_failure`` in the JUnit properties, printed with
``-rP``). One more shows that, with the mirror check off, a stale mirror still fails
against the reference: the tiny attention reads the host lengths, as vllm-ascend's
kernels do.
"""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import torch
from hypothesis import given, settings

from devices.sim.device import poison_value
from sim.impls.kit import vllm_model as recording
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.metadata_checks import MetadataMismatch
from sim.impls.vllm_ascend import builders, generation
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.impls.vllm_ascend.build import configured
from sim.impls.vllm_ascend.divergences import RULES
from tests.checks import core_checks
from tests.checks.e2e_checks import check_implementation
from tests.impls.fixes import defining_class
from tests.impls.vllm_ascend.metadata_breaks import (
    attn_state_of_the_first_pass,
    computed_as_seq_lens,
    computed_not_advanced,
    host_mirror_not_advanced,
    lists_shared_across_steps,
    other_methods_steps_as_new_prompts,
    step_slots_of_a_32k_table,
    written_into_the_step_before,
)
from tests.impls.vllm_ascend.method_breaks import host_mirror_read_before_its_copy_lands
from tests.properties.test_propose_loop import EDGES, LONG_CONTEXT, TYPICAL
from tests.strategies.batches import batch_cases
from tests.strategies.scenarios import scenarios


def _break_the_update(monkeypatch, breaking, method: str = "attn_update_stack_num_spec_norm") -> None:
    cls = defining_class(configured(2, 16, 64, 8), method)
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))


def _serving_runs_fail(
    impl, device, name: str, record_property, padded: bool | None, match: str, **fields
) -> AssertionError:
    """The failure of the serving runs of ``impl`` (hypothesis' shrunk example, its scenario's ``fields``
    replaced), whose message must match ``match``; records the seconds from the start of the search to
    the first failing example."""
    start, first = time.perf_counter(), []

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize, max_examples=60)
    @given(scenario=scenarios(padded=padded, max_iterations=10))
    def gate(scenario):
        try:
            check_implementation(impl, dataclasses.replace(scenario, **fields), device, name)
        except AssertionError:
            first or first.append(time.perf_counter() - start)
            raise

    with pytest.raises(AssertionError, match=match) as failure:
        gate()
    record_property("seconds_to_first_failure", round(first[0], 2))
    print(f"{name}: first failure after {first[0]:.2f} s; shrunk: {str(failure.value).splitlines()[:3]}")
    return failure.value


MIRRORS_NOT_ADVANCED = [("seq_lens_cpu", True), ("_seq_lens_cpu", False), ("query_start_loc_cpu", None)]


@pytest.mark.parametrize(("field", "padded"), MIRRORS_NOT_ADVANCED, ids=[f for f, _ in MIRRORS_NOT_ADVANCED])
def test_a_host_mirror_not_advanced_fails_by_name(monkeypatch, device, impl, record_property, field, padded):
    """``_seq_lens_cpu`` is set by the unpadded path only (``prepare_inputs``), hence the modes; v0.18.0's sets
    ``seq_lens_cpu`` alone there."""
    breaking = host_mirror_not_advanced(field)
    _break_the_update(monkeypatch, breaking)
    try:
        failure = _serving_runs_fail(impl, device, f"stale-{field}", record_property, padded, rf"host mirror {field} ")
    except pytest.fail.Exception:
        if not breaking.applied:
            pytest.skip(f"this checkout's draft metadata carries no {field} mirror: nothing to leave stale")
        raise
    assert isinstance(failure, MetadataMismatch)
    assert re.match(rf"step \d+: host mirror {field} is not \w+ over the \d+ live rows: got \[", str(failure))


def test_a_first_pass_computed_count_that_is_not_seq_lens_less_the_query_fails_by_name(
    monkeypatch, device, impl, record_property
):
    _break_the_update(monkeypatch, computed_as_seq_lens, "prepare_inputs_padded")
    _serving_runs_fail(impl, device, "computed-as-seq-lens", record_property, True, r"step 1 num_computed_tokens\[")


def test_a_computed_count_that_drifts_otherwise_than_the_known_defect_fails_by_name(
    monkeypatch, device, impl, record_property
):
    _break_the_update(monkeypatch, computed_not_advanced)
    _serving_runs_fail(
        impl, device, "computed-not-advanced", record_property, None, r"step [2-9] num_computed_tokens\["
    )


def test_a_stale_host_mirror_changes_what_attention_reads(monkeypatch, device, impl, record_property):
    """With the mirror check off, a stale host mirror of the lengths the builder reads still fails against
    the reference: the tiny attention reads the host lengths, as vllm-ascend's kernels do. The builder
    reads vLLM's ``_seq_lens_cpu`` first, which the runner hands from v0.20.2rc on (its optimistic host
    lengths); v0.18.0's hands ``seq_lens_cpu`` alone."""
    field = "_seq_lens_cpu" if generation.runner_hands_optimistic_host_lengths() else "seq_lens_cpu"
    _break_the_update(monkeypatch, host_mirror_not_advanced(field))
    for checking in (recording, builders):  # the recording group's check, and the real builder's
        monkeypatch.setattr(checking, "check_mirrors", lambda cad, step: None)
    failure = _serving_runs_fail(impl, device, "stale-seq-lens-cpu-unchecked", record_property, True, r"mismatches")
    assert not isinstance(failure, MetadataMismatch)


@pytest.mark.parametrize("field", ["seq_lens", "seq_lens_cpu"])
def test_a_tensor_written_after_its_build_fails_by_name(monkeypatch, device, impl, record_property, field):
    _break_the_update(monkeypatch, written_into_the_step_before(field))
    failure = _serving_runs_fail(
        impl, device, f"aliased-{field}", record_property, None, rf"step \d+: {field} changed between build and forward"
    )
    assert isinstance(failure, MetadataMismatch) and "at build [" in str(failure)


def test_the_core_gates_step_check_catches_a_host_mirror_not_advanced(monkeypatch, device):
    """The gate's step property builds each step through the recording group: its mirror check fails there too."""
    _break_the_update(monkeypatch, host_mirror_not_advanced("seq_lens_cpu"))
    ops = AscendOps()

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize)
    @given(case=batch_cases())
    def gate(case):
        core_checks.check_steps(ops, case, padded=True, device=device, rules=RULES)

    with pytest.raises(MetadataMismatch, match=r"^step \d+: host mirror seq_lens_cpu is not seq_lens"):
        gate()


def test_a_host_mirror_read_before_its_non_blocking_copy_lands_fails_the_gate(
    monkeypatch, device, impl, record_property
):
    """vllm-ascend's own ``t.to("cpu", non_blocking=True)`` read at once (bug class 6, #4254): on the
    simulator the copy holds poison until synchronized (``devices.sim.early_reads``), so the host mirror
    the first pass's attention is handed is wrong."""
    if not getattr(device, "poisons_unsynced_copies", False):
        pytest.skip(f"device {device.name} does not poison unsynchronized copies")
    _break_the_update(monkeypatch, host_mirror_read_before_its_copy_lands(), "prepare_inputs_padded")
    poison = poison_value(torch.int32)  # what the copy's destination holds until it lands
    match = rf"step 1: host mirror seq_lens_cpu is not seq_lens .* got \[{poison}"
    _serving_runs_fail(impl, device, "host-mirror-read-early", record_property, True, match)


def test_the_same_copy_read_after_its_sync_passes_the_gate(monkeypatch, device, impl):
    """The same non-blocking copy with ``torch.npu.synchronize()`` before the read: the check is of the
    early read, not of every device->host copy."""
    _break_the_update(monkeypatch, host_mirror_read_before_its_copy_lands(synced=True), "prepare_inputs_padded")

    @settings(settings.get_profile("broken"), derandomize=True, max_examples=30)
    @given(scenario=scenarios(padded=True, max_iterations=10))
    def gate(scenario):
        check_implementation(impl, scenario, device, "host-mirror-read-after-its-sync")

    gate()


def test_a_builder_sharing_its_lists_across_steps_fails_by_name(monkeypatch, device, impl, record_property):
    """vllm-ascend's own attention builder handing every step one ``seq_lens_list``, rewritten in place
    (the SFA builder's shared buffers before #14236): each earlier step's forward finds the list changed."""
    cls = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionMetadataBuilder
    monkeypatch.setattr(cls, "build", lists_shared_across_steps(cls.build))
    failure = _serving_runs_fail(
        impl, device, "builder-lists-shared", record_property, None, r"metadata.seq_lens_list changed between build"
    )
    assert isinstance(failure, MetadataMismatch) and re.match(r"step \d+: metadata.seq_lens_list", str(failure))


def test_draft_steps_built_with_the_first_passs_state_fail_by_name(monkeypatch, device, impl, record_property):
    """Steps 2..K built with the first pass's ``attn_state``: after a batch of new prompts
    (``PrefillNoCache``) a step's one row would attend to itself alone, and its forward says so."""
    _break_the_update(monkeypatch, attn_state_of_the_first_pass)
    match = r"step [2-9]: the attention reads no cached context \(attn_state PrefillNoCache\)"
    failure = _serving_runs_fail(impl, device, "step-attn-state", record_property, None, match)
    assert isinstance(failure, MetadataMismatch)


def test_an_eagle_drafters_steps_labelled_new_prompts_fail_by_name(monkeypatch, device, impl, record_property):
    """Steps 2..K of a drafter of another method than mtp labelled ``PrefillNoCache``: an EAGLE drafter's
    runs fail by name; an MTP drafter's step metadata is not touched (its run passes), so the gate sees
    the break through its EAGLE runs alone."""
    _break_the_update(monkeypatch, other_methods_steps_as_new_prompts)
    check_implementation(impl, TYPICAL, device, "other-methods-steps-mtp")
    match = r"step [2-9]: the attention reads no cached context \(attn_state PrefillNoCache\)"
    failure = _serving_runs_fail(impl, device, "eagle-steps-new-prompts", record_property, None, match, method="eagle")
    assert isinstance(failure, MetadataMismatch)


def test_step_slots_of_a_narrow_table_fail_the_long_context_alone(monkeypatch, device, impl):
    """A step's block looked up among the first 256 of its row (``step_slots_of_a_32k_table``): contexts
    in blocks of 128 up to 32768 tokens are served right (``EDGES["blocks-of-128"]``, ``TYPICAL`` in such
    blocks), and the 64k-token context (``LONG_CONTEXT``) fails at its first draft step's slot."""
    _break_the_update(monkeypatch, step_slots_of_a_32k_table)
    check_implementation(impl, EDGES["blocks-of-128"], device, "narrow-table-blocks-of-128")
    check_implementation(impl, dataclasses.replace(TYPICAL, block_size=128), device, "narrow-table-typical")
    with pytest.raises(AssertionError, match=r"slot_mapping"):
        check_implementation(impl, LONG_CONTEXT, device, "narrow-table-long-context")
