"""Every property has been seen failing: each broken variant must be caught.

A variant that slips through means a property lost its teeth. These
meta-tests run last in the gate (pytest-order): a broken core fails the cheap
properties first.

Their inner ``@settings`` come from ``_broken()``, which builds on the
``broken`` profile at run time and takes ``derandomize`` from the profile in
force, so under ``ci`` every meta-test draws the same examples on every run.
Each accepts exactly the failures its bug can produce: a property's
``AssertionError``, plus the crash that is that bug's own symptom where it has
one (named per variant below), never any exception.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from hypothesis import given, reject, settings

from devices.base import GraphError
from mtp.proposer import GraphNotCaptured, MtpProposer
from sim.serving.run import run_scenario
from tests.checks import core_checks, sequence_checks
from tests.meta import broken_devices, broken_ops, broken_proposers
from tests.properties import test_device_contract as contract
from tests.checks.e2e_checks import check_dummy_run_matches_propose
from tests.strategies.batches import batch_cases
from tests.strategies.malformed import malformed_inputs
from tests.strategies.scenarios import scenarios
from tests.strategies.sequences import call_sequences
from tests.properties.test_validation import check_malformed_refused

pytestmark = pytest.mark.order(-1)


def _broken(**overrides) -> settings:
    """The ``broken`` profile, derandomized whenever the profile in force is (``ci``)."""
    return settings(settings.get_profile("broken"), derandomize=settings.default.derandomize, **overrides)


def _both_modes(check):
    def run(ops, case, device):
        for padded in (True, False):
            check(ops, case, padded, device)

    return run


CAUGHT_BY = [
    (broken_ops.SlotPlusOne, _both_modes(core_checks.check_steps)),
    (broken_ops.PaddedSeqLensNotLowered, functools.partial(core_checks.check_steps, padded=True)),
    (broken_ops.SampleIndexOffByOne, _both_modes(core_checks.check_first_pass)),
    (broken_ops.SampleIndexOffByOne, core_checks.check_padded_matches_unpadded),
    (broken_ops.MaxQueryLenFromOldLengths, functools.partial(core_checks.check_first_pass, padded=False)),
    (broken_ops.PaddedPathSyncs, core_checks.check_padded_path_never_syncs),
    (broken_ops.DiscardedListsCounted, core_checks.check_discarded_samples_ignored),
    (broken_ops.UnpaddedIdsAsFloat, functools.partial(core_checks.check_first_pass, padded=False)),
]


@pytest.mark.parametrize("variant, check", CAUGHT_BY, ids=[f"{v.__name__}-{i}" for i, (v, _) in enumerate(CAUGHT_BY)])
def test_broken_variant_is_caught(device, variant, check):
    @_broken()
    @given(case=batch_cases())
    def prop(case):
        check(variant(), case=case, device=device)

    with pytest.raises(AssertionError):
        prop()


E2E_CAUGHT = [
    (broken_ops.SlotPlusOne, True),
    (broken_ops.SlotPlusOne, False),
    (broken_ops.PaddedSeqLensNotLowered, True),
]


@pytest.mark.parametrize(
    "variant, padded", E2E_CAUGHT, ids=[f"{v.__name__}-{'padded' if p else 'unpadded'}" for v, p in E2E_CAUGHT]
)
def test_broken_variant_changes_the_drafts(device, variant, padded):
    """The seed's defects change draft tokens, not only metadata: the tiny
    model is sensitive enough, even with a cache of stale zeros (no NaN poison)."""

    @_broken(max_examples=100)
    @given(scenario=scenarios(padded=padded))
    def prop(scenario):
        try:
            report = run_scenario(scenario, device, ops=variant(), stop_at_first_mismatch=False, poison_kv=False)
        except IndexError:
            # A slot pushed past the cache's last block (SlotPlusOne on the highest block id) crashes
            # the write: a real symptom, but not the one this test is about. Draw another scenario.
            reject()
        wrong_drafts = [m for m in report.mismatches if m.what.startswith("draft")]
        assert not wrong_drafts, wrong_drafts[0]

    with pytest.raises(AssertionError):
        prop()


# The padded query_start_loc can push a sample index below -rows: torch raises
# IndexError inside propose() (an NPU raises a device-side assert), before any
# comparison. That crash is the bug's own symptom, and the gate fails on it too.
SAMPLE_INDEX_OUT_OF_RANGE = (IndexError,)

PROPOSER_CAUGHT = [
    (broken_proposers.CaptureSizesWrongOrder, "piecewise", ()),
    (broken_proposers.CaptureSizesStaleCopy, "full", ()),
    (broken_proposers.PaddedQslForSampleIndices, "piecewise", SAMPLE_INDEX_OUT_OF_RANGE),
    (broken_proposers.PaddedQslForSampleIndices, "full", SAMPLE_INDEX_OUT_OF_RANGE),
    (broken_proposers.BufferReplaced, "full", ()),
    (broken_proposers.StepBakedAtCapture, "full", ()),
    (broken_proposers.HostBoundNotAdvanced, "eager", ()),
    (broken_proposers.HostBoundNotAdvanced, "full", ()),
    (broken_proposers.ReadBeforeSync, "eager", ()),
]


@pytest.mark.parametrize(
    "variant, mode, symptoms", PROPOSER_CAUGHT, ids=[f"{v.__name__}-{m}" for v, m, _ in PROPOSER_CAUGHT]
)
def test_broken_proposer_is_caught(device, variant, mode, symptoms):
    if mode != "eager" and not device.supports_graphs:
        pytest.skip(f"device {device.name} lacks supports_graphs")

    @_broken(max_examples=100)
    @given(scenario=scenarios())
    def prop(scenario):
        scenario = dataclasses.replace(scenario, graph_mode=mode)
        report = run_scenario(scenario, device, proposer_cls=variant)
        assert report.ok, report.mismatches[0]

    with pytest.raises((AssertionError, GraphError, GraphNotCaptured, *symptoms)):
        prop()


SEQUENCE_CAUGHT = [
    (broken_proposers.ReturnsDraftBuffer, "drafts returned by call"),  # the caller's drafts overwritten
    (broken_proposers.StaleSlotsPastLastToken, "graph-padding slots"),  # needs graphs: padding rows
]


@pytest.mark.parametrize("variant, symptom", SEQUENCE_CAUGHT, ids=[v.__name__ for v, _ in SEQUENCE_CAUGHT])
def test_broken_proposer_is_caught_in_sequence(device, variant, symptom):
    """State carried from one call to the next, invisible to a single call on a fresh proposer."""
    if not device.supports_graphs and variant is broken_proposers.StaleSlotsPastLastToken:
        pytest.skip(f"device {device.name} lacks supports_graphs")

    @_broken(max_examples=200)
    @given(seq=call_sequences())
    def prop(seq):
        sequence_checks.check_calls_in_sequence(variant, seq, device)

    with pytest.raises(AssertionError, match=symptom):
        prop()


@pytest.mark.parametrize("variant", [MtpProposer, broken_proposers.DummyRunLogitsOnce])
def test_dummy_run_computes_logits_like_a_real_call(device, variant):
    if variant is MtpProposer:
        check_dummy_run_matches_propose(device, variant)
    else:
        with pytest.raises(AssertionError, match="logit"):
            check_dummy_run_matches_propose(device, variant)


DEVICE_CAUGHT = [
    (broken_devices.CopiesLandAtOnce, contract.test_unsynchronized_copy_holds_poison),
    (
        broken_devices.SyncsAllowedInCapture,
        functools.partial(contract.test_host_sync_inside_capture_is_refused, sync="item"),
    ),
    (broken_devices.InputsNotChecked, contract.test_rebound_input_is_stale_and_reported),
    (broken_devices.ParamsIgnoreUpdates, contract.test_host_params_frozen_until_updated),
    (broken_devices.ReplayDoesNothing, contract.test_replay_equals_eager_on_new_inputs),
    (broken_devices.ReplaysAtAnySize, contract.test_replay_only_at_captured_size),
    (broken_devices.BlockingCopyDeferred, contract.test_blocking_copy_is_immediate),
    (broken_devices.SyncsNotCounted, contract.test_host_syncs_are_counted_per_call_site),
]


@pytest.mark.parametrize("variant, check", DEVICE_CAUGHT, ids=[v.__name__ for v, _ in DEVICE_CAUGHT])
def test_lax_simulator_fails_the_device_contract(variant, check):
    lax = variant()
    gen = torch.Generator().manual_seed(0)
    buffers = torch.randn(4, 8, generator=gen), torch.randn(8, 8, generator=gen)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        check(device=lax, buffers=buffers)


def test_reversed_all_gather_fails_the_device_contract(device):
    with pytest.raises(AssertionError, match="all-gather gave"):
        contract.check_all_gather(device, gather="tests.meta.broken_devices:all_gather_rank_reversed")


def test_missing_validation_is_caught():
    @_broken(max_examples=100)
    @given(m=malformed_inputs())
    def prop(m):
        check_malformed_refused(broken_ops.NoValidation(), m)

    # Unvalidated, a malformed call either goes through (DID NOT RAISE), crashes
    # with another error deep inside, or raises without naming the field.
    with pytest.raises((Exception, pytest.fail.Exception)):
        prop()
