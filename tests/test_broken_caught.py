"""Every property has been seen failing: each broken variant must be caught.

A variant that slips through means a property lost its teeth.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch
from hypothesis import given, settings

from devices.base import GraphError
from mtp.proposer import GraphNotCaptured, MtpProposer
from sim.serving.run import run_scenario
from tests import broken_devices, broken_ops, broken_proposers, core_checks
from tests import test_device_contract as contract
from tests.e2e_checks import check_dummy_run_matches_propose
from tests.strategies.batches import batch_cases
from tests.strategies.malformed import malformed_inputs
from tests.strategies.scenarios import scenarios
from tests.test_validation import check_malformed_refused


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
]


@pytest.mark.parametrize("variant, check", CAUGHT_BY, ids=[f"{v.__name__}-{i}" for i, (v, _) in enumerate(CAUGHT_BY)])
def test_broken_variant_is_caught(device, variant, check):
    @settings(settings.get_profile("broken"))
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

    @settings(settings.get_profile("broken"), max_examples=100)
    @given(scenario=scenarios(padded=padded))
    def prop(scenario):
        report = run_scenario(scenario, device, ops=variant(), stop_at_first_mismatch=False, poison_kv=False)
        wrong_drafts = [m for m in report.mismatches if m.what.startswith("draft")]
        assert not wrong_drafts, wrong_drafts[0]

    with pytest.raises(AssertionError):
        prop()


PROPOSER_CAUGHT = [
    (broken_proposers.CaptureSizesWrongOrder, "piecewise"),
    (broken_proposers.CaptureSizesStaleCopy, "full"),
    (broken_proposers.PaddedQslForSampleIndices, "piecewise"),
    (broken_proposers.PaddedQslForSampleIndices, "full"),
    (broken_proposers.BufferReplaced, "full"),
    (broken_proposers.StepBakedAtCapture, "full"),
    (broken_proposers.HostBoundNotAdvanced, "eager"),
    (broken_proposers.HostBoundNotAdvanced, "full"),
    (broken_proposers.ReadBeforeSync, "eager"),
]


@pytest.mark.parametrize("variant, mode", PROPOSER_CAUGHT, ids=[f"{v.__name__}-{m}" for v, m in PROPOSER_CAUGHT])
def test_broken_proposer_is_caught(device, variant, mode):
    if mode != "eager" and not device.supports_graphs:
        pytest.skip(f"device {device.name} lacks supports_graphs")

    @settings(settings.get_profile("broken"), max_examples=100)
    @given(scenario=scenarios())
    def prop(scenario):
        scenario = dataclasses.replace(scenario, graph_mode=mode)
        report = run_scenario(scenario, device, proposer_cls=variant)
        assert report.ok, report.mismatches[0]

    with pytest.raises((AssertionError, GraphError, GraphNotCaptured)):
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
        contract.check_all_gather(device, gather="tests.broken_devices:all_gather_rank_reversed")


def test_missing_validation_is_caught():
    @settings(settings.get_profile("broken"), max_examples=100)
    @given(m=malformed_inputs())
    def prop(m):
        check_malformed_refused(broken_ops.NoValidation(), m)

    # Unvalidated, a malformed call either goes through (DID NOT RAISE), crashes
    # with another error deep inside, or raises without naming the field.
    with pytest.raises((Exception, pytest.fail.Exception)):
        prop()
