"""The gate catches a regression in vllm-ascend's own code, with its divergences modelled.

Each case breaks one vllm-ascend method the way upstream history broke such
methods (a slot advanced by +1, a sample row off by one, the first valid
sampled token taken for the last), then runs the gate's check under
``--impl vllm_ascend``'s rules: it must fail. Without these, a modelled
divergence could hide a real regression.

The metadata cases break what attention is handed rather than what the
device side holds (``metadata_breaks``): a host mirror not advanced, a step's
tensor written after it was built. Each must fail a serving run by name
(``sim.impls.vllm.metadata_checks``), and each reports the seconds to its
first failing example (``seconds_to_first_failure`` in the JUnit properties,
printed with ``-rP``).
"""

from __future__ import annotations

import functools
import re
import time

import pytest
from hypothesis import given, settings

from sim.impls.vllm import model as recording
from sim.impls.vllm.metadata_checks import MetadataMismatch
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.impls.vllm_ascend.build import configured
from sim.impls.vllm_ascend.divergences import RULES
from sim.impls.vllm_ascend.model import AscendTinyMtp
from tests.checks import core_checks
from tests.checks.e2e_checks import check_implementation
from tests.impls.suites import assert_serving_runs_fail_on_a_later_draft, later_steps_fed_rolled_hidden_rows
from tests.impls.vllm_ascend.metadata_breaks import (
    computed_as_seq_lens,
    host_mirror_not_advanced,
    written_into_the_step_before,
)
from tests.strategies.batches import batch_cases
from tests.strategies.scenarios import scenarios


def _slot_plus_one(original):
    @functools.wraps(original)  # keeps the signature sim.impls.vllm_ascend.generation reads
    def broken(self, *args, **kwargs):
        cad, rest = original(self, *args, **kwargs)
        cad.slot_mapping = cad.slot_mapping + (cad.slot_mapping >= 0).to(cad.slot_mapping.dtype)
        return cad, rest

    return broken


def _sample_row_off_by_one(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rows, sample, rejected = original(self, *args, **kwargs)
        return cad, rows, sample - 1, rejected

    return broken


def _first_valid_token(original):
    @functools.wraps(original)
    def broken(self, sampled, *args, **kwargs):
        ids, counts = original(self, sampled[:, :1].contiguous(), *args, **kwargs)
        return ids, counts

    return broken


BREAKS = [
    ("attn_update_stack_num_spec_norm", _slot_plus_one, core_checks.check_steps),
    ("prepare_inputs_padded", _sample_row_off_by_one, core_checks.check_first_pass),
    ("prepare_next_token_ids_padded", _first_valid_token, core_checks.check_first_pass),
    # the core gate's step check builds each step through the recording group, whose mirror check fails
    ("attn_update_stack_num_spec_norm", host_mirror_not_advanced("seq_lens_cpu"), core_checks.check_steps),
]
BREAK_IDS = [m if i < 3 else f"{m}-seq_lens_cpu-not-advanced" for i, (m, _, _) in enumerate(BREAKS)]


@pytest.mark.parametrize(("method", "breaking", "check"), BREAKS, ids=BREAK_IDS)
def test_a_broken_vllm_ascend_fails_the_gate(monkeypatch, device, method, breaking, check):
    cls = next(c for c in type(configured(2, 16, 64, 8)).__mro__ if method in vars(c))  # where it is defined
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    ops = AscendOps()

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize)
    @given(case=batch_cases())
    def gate(case):
        functools.partial(check, padded=True, rules=RULES)(ops, case, device=device)

    with pytest.raises(AssertionError):
        gate()


def _break_the_update(monkeypatch, breaking, method: str = "attn_update_stack_num_spec_norm") -> None:
    cls = next(c for c in type(configured(2, 16, 64, 8)).__mro__ if method in vars(c))
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))


def _serving_runs_fail(impl, device, name: str, record_property, padded: bool | None, match: str) -> AssertionError:
    """The failure of the serving runs of ``impl`` (hypothesis' shrunk example), whose message must match
    ``match``; records the seconds from the start of the search to the first failing example."""
    start, first = time.perf_counter(), []

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize, max_examples=60)
    @given(scenario=scenarios(padded=padded, max_iterations=10))
    def gate(scenario):
        try:
            check_implementation(impl, scenario, device, name)
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
    """``_seq_lens_cpu`` is set by the unpadded path only (``prepare_inputs``), hence the modes."""
    _break_the_update(monkeypatch, host_mirror_not_advanced(field))
    failure = _serving_runs_fail(impl, device, f"stale-{field}", record_property, padded, rf"host mirror {field} ")
    assert isinstance(failure, MetadataMismatch)
    assert re.match(rf"step \d+: host mirror {field} is not \w+ over the \d+ live rows: got \[", str(failure))


def test_a_first_pass_computed_count_that_is_not_seq_lens_less_the_query_fails_by_name(
    monkeypatch, device, impl, record_property
):
    _break_the_update(monkeypatch, computed_as_seq_lens, "prepare_inputs_padded")
    failure = _serving_runs_fail(
        impl, device, "computed-as-seq-lens", record_property, True, r"step 1: host mirror num_computed_tokens_cpu "
    )
    assert isinstance(failure, MetadataMismatch)


def test_a_stale_host_mirror_changes_what_attention_reads(monkeypatch, device, impl, record_property):
    """With the mirror check off, the stale ``seq_lens_cpu`` still fails against the reference: the
    tiny attention reads the host lengths, as vllm-ascend's kernels do."""
    _break_the_update(monkeypatch, host_mirror_not_advanced("seq_lens_cpu"))
    monkeypatch.setattr(recording, "check_mirrors", lambda cad, step: None)
    failure = _serving_runs_fail(impl, device, "stale-seq-lens-cpu-unchecked", record_property, True, r"mismatches")
    assert not isinstance(failure, MetadataMismatch)


@pytest.mark.parametrize("field", ["seq_lens", "seq_lens_cpu"])
def test_a_tensor_written_after_its_build_fails_by_name(monkeypatch, device, impl, record_property, field):
    _break_the_update(monkeypatch, written_into_the_step_before(field))
    failure = _serving_runs_fail(
        impl, device, f"aliased-{field}", record_property, None, rf"step \d+: {field} changed between build and forward"
    )
    assert isinstance(failure, MetadataMismatch) and "at build [" in str(failure)


def test_drafts_2_to_k_changed_alone_fail_the_gate_in_the_padded_path(monkeypatch, device, impl):
    """vllm-ascend's padded path carries ``padded-seq-lens-not-lowered``, modelled exactly, so drafts
    2..K are compared there: a change to them alone fails a padded serving run on a later draft."""
    monkeypatch.setattr(AscendTinyMtp, "forward", later_steps_fed_rolled_hidden_rows(AscendTinyMtp.forward))
    assert_serving_runs_fail_on_a_later_draft(impl, device, "broken-later-steps", padded=True)
