"""Every property has been seen failing: each broken variant must be caught.

A variant that slips through means a property lost its teeth. These
meta-tests run last in the gate (pytest-order): a broken core fails the cheap
properties first.

Their inner ``@settings`` come from ``_broken()``, which builds on the
``broken`` profile at run time and takes ``derandomize`` from the profile in
force, so under ``ci`` every meta-test draws the same examples on every run.
Each accepts exactly the failures its bug can produce: a property's
``AssertionError`` with the message the property writes (``match=``), plus
the crash that is that bug's own symptom where it has one (named per variant
below), never any exception. Every broken variant is listed by some
parametrization here or in tests/meta/test_ranks_broken.py, which
tests/meta/test_every_variant_caught.py checks.
"""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch
from hypothesis import given, reject, settings

from devices.base import GraphError
from mtp.proposer import GraphNotCaptured, MtpProposer
from sim.cli import main as sim_main
from sim.oracle.rules import Rules
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks import core_checks, sequence_checks
from tests.checks.e2e_checks import check_dummy_run_matches_propose, check_scenario
from tests.checks.modes import NEEDS_GRAPHS
from tests.meta import broken_devices, broken_ops, broken_paths, broken_pcp, broken_proposers, broken_tp
from tests.properties import test_device_contract as contract
from tests.properties.test_group_of_one import ODD_PREFILL, check_group_of_one
from tests.properties.test_mrope_eagle3 import SMALL as PATHS_SMALL
from tests.properties.test_tp_plan import check_padding
from tests.properties.test_validation import check_malformed_refused
from tests.strategies.batches import batch_cases
from tests.strategies.malformed import malformed_inputs
from tests.strategies.scenarios import scenarios
from tests.strategies.sequences import call_sequences

pytestmark = pytest.mark.order(-1)

# What the core checks, the serving-run check and a sequence write on failure: a case that replays.
CORE_CASE = r"replay: BatchCase\("
SERVING_RUN = r"mismatches:(.|\n)*replay: python -m sim replay "


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

    with pytest.raises(AssertionError, match=CORE_CASE):
        prop()


DRAFT_MODEL_CAUGHT = [
    (broken_ops.DraftModelIdsShifted, _both_modes(core_checks.check_first_pass)),
    (broken_ops.DraftModelNextTokenAtItsPredecessorsPosition, _both_modes(core_checks.check_first_pass)),
    (broken_ops.DraftModelRejectedRowsWriteKv, functools.partial(core_checks.check_first_pass, padded=True)),
    (broken_ops.DraftModelSeqLensNotGrown, _both_modes(core_checks.check_first_pass)),
    (broken_ops.DraftModelStepsFromTheLastAccepted, _both_modes(core_checks.check_steps)),
    (broken_ops.DraftModelRowsCountedOnTheHost, core_checks.check_padded_path_never_syncs),
]
DRAFT_MODEL_VARIANTS = [v for v, _ in DRAFT_MODEL_CAUGHT]
# What changes a serving run's values (a host sync does not: serving runs do not count them).
DRAFT_MODEL_SERVED = [v for v in DRAFT_MODEL_VARIANTS if v is not broken_ops.DraftModelRowsCountedOnTheHost]


@pytest.mark.parametrize("variant, check", DRAFT_MODEL_CAUGHT, ids=[v.__name__ for v in DRAFT_MODEL_VARIANTS])
def test_broken_draft_model_is_caught(device, variant, check):
    """Each broken draft-model first pass fails the single-call properties of a draft model's batches (its
    values, or the padded path's freedom from host syncs)."""

    @_broken()
    @given(case=batch_cases(method="draft_model"))
    def prop(case):
        check(variant(), case=case, device=device)

    with pytest.raises(AssertionError, match=CORE_CASE):
        prop()


@pytest.mark.parametrize("variant", DRAFT_MODEL_SERVED, ids=lambda v: v.__name__)
def test_broken_draft_model_fails_its_serving_run(device, variant):
    """tests/properties/test_mrope_eagle3.py's early draft-model case fails on each broken draft-model path."""
    scenario = dataclasses.replace(PATHS_SMALL, method="draft_model")
    with pytest.raises(AssertionError, match=SERVING_RUN):
        check_scenario(scenario, device, f"broken-{variant.__name__}", ops=variant())


E2E_CAUGHT = [
    (broken_ops.SlotPlusOne, True),
    (broken_ops.SlotPlusOne, False),
    (broken_ops.PaddedSeqLensNotLowered, True),
]


@pytest.mark.parametrize(
    "variant, padded", E2E_CAUGHT, ids=[f"{v.__name__}-{'padded' if p else 'unpadded'}" for v, p in E2E_CAUGHT]
)
def test_broken_variant_changes_the_drafts(device, variant, padded):
    """The 0.13-era proposer's defects change draft tokens, not only metadata: the tiny
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
        assert not wrong_drafts, f"wrong drafts: {wrong_drafts[0]}"

    with pytest.raises(AssertionError, match="wrong drafts: "):
        prop()


DEFECT_CAUGHT = [
    # A later call's draft 1 may read what the wrong step 2 wrote off the table: any draft may show it.
    (broken_proposers.NotLoweredStepHiddenRowBefore, Rules(padded_seq_lens_lowered=False), True, "draft [2-9]"),
    (broken_proposers.PlusOneStepHiddenRowBefore, Rules(slots_from_block_table=False), None, "draft [1-9]"),
]


@pytest.mark.parametrize(
    "variant, rules, padded, first_wrong", DEFECT_CAUGHT, ids=[v.__name__ for v, *_ in DEFECT_CAUGHT]
)
def test_a_wrong_draft_beside_a_modelled_defect_is_caught(device, variant, rules, padded, first_wrong):
    """Drafts 2..K under a known defect are compared against the defect model (sim.oracle.defect_drafts),
    not dropped: the defect plus a step-2 hidden row off by one, no metadata changed, fails on a draft
    under the defect's own rules (tests/harness/test_defect_drafts.py: the defect alone passes them)."""

    @_broken(max_examples=100)
    @given(scenario=scenarios(padded=padded))
    def prop(scenario):
        try:
            report = run_scenario(scenario, device, proposer_cls=variant, rules=rules, stop_at_first_mismatch=False)
        except IndexError:
            reject()  # a plus-one slot past the cache's last block: see test_broken_variant_changes_the_drafts
        wrong_drafts = [m for m in report.mismatches if m.what.startswith("draft")]
        assert not wrong_drafts, f"wrong drafts: {wrong_drafts[0]}"

    with pytest.raises(AssertionError, match=rf"wrong drafts: iteration \d+, request \d+: {first_wrong}"):
        prop()


# The padded query_start_loc can push a sample index below -rows: torch raises
# IndexError inside propose() (an NPU raises a device-side assert), before any
# comparison. That crash is the bug's own symptom, and the gate fails on it too.
# An accelerator's assert ends every later kernel of the test process: such a
# variant runs on a device that survives a bad index (the simulator) only.
SAMPLE_INDEX_OUT_OF_RANGE = (IndexError,)


def _in(mode: str, *args):
    """A parameter in ``mode``: one that needs graphs unless eager, and a device that survives a bad
    index where its symptom is one."""
    marks = [] if mode == "eager" else [NEEDS_GRAPHS]
    if IndexError in args[1]:
        marks.append(pytest.mark.needs("survives_bad_indices"))
    return pytest.param(*args, mode, marks=marks, id=f"{args[0].__name__}-{mode}")


PROPOSER_CAUGHT = [
    _in("piecewise", broken_proposers.CaptureSizesWrongOrder, ()),
    _in("full", broken_proposers.CaptureSizesStaleCopy, ()),
    _in("piecewise", broken_proposers.PaddedQslForSampleIndices, SAMPLE_INDEX_OUT_OF_RANGE),
    _in("full", broken_proposers.PaddedQslForSampleIndices, SAMPLE_INDEX_OUT_OF_RANGE),
    _in("full", broken_proposers.BufferReplaced, ()),
    _in("full", broken_proposers.StepBakedAtCapture, ()),
    _in("eager", broken_proposers.HostBoundNotAdvanced, ()),
    _in("full", broken_proposers.HostBoundNotAdvanced, ()),
    _in("eager", broken_proposers.ReadBeforeSync, ()),
]


@pytest.mark.parametrize("variant, symptoms, mode", PROPOSER_CAUGHT)
def test_broken_proposer_is_caught(device, variant, symptoms, mode):
    @_broken(max_examples=100)
    @given(scenario=scenarios())
    def prop(scenario):
        scenario = dataclasses.replace(scenario, graph_mode=mode)
        report = run_scenario(scenario, device, proposer_cls=variant)
        assert report.ok, f"mismatches: {report.mismatches[0]}"

    with pytest.raises((AssertionError, GraphError, GraphNotCaptured, *symptoms)) as failed:
        prop()
    if failed.type is AssertionError:
        failed.match("mismatches: ")


SEQUENCE_CAUGHT = [
    pytest.param(broken_proposers.ReturnsDraftBuffer, "drafts returned by call", id="ReturnsDraftBuffer"),
    pytest.param(  # graph-padding rows exist only under graphs
        broken_proposers.StaleSlotsPastLastToken,
        "graph-padding slots",
        id="StaleSlotsPastLastToken",
        marks=NEEDS_GRAPHS,
    ),
]


@pytest.mark.parametrize("variant, symptom", SEQUENCE_CAUGHT)
def test_broken_proposer_is_caught_in_sequence(device, variant, symptom):
    """State carried from one call to the next, invisible to a single call on a fresh proposer."""

    @_broken(max_examples=200)
    @given(seq=call_sequences())
    def prop(seq):
        sequence_checks.check_calls_in_sequence(variant, seq, device)

    with pytest.raises(AssertionError, match=symptom):
        prop()


@NEEDS_GRAPHS
@pytest.mark.parametrize("variant", [MtpProposer, broken_proposers.DummyRunLogitsOnce], ids=lambda v: v.__name__)
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


@pytest.mark.parametrize("gather", [broken_devices.all_gather_rank_reversed], ids=lambda g: g.__name__)
def test_reversed_all_gather_fails_the_device_contract(device, gather):
    with pytest.raises(AssertionError, match="all-gather gave"):
        contract.check_all_gather(device, gather=f"{gather.__module__}:{gather.__name__}")


@pytest.mark.parametrize("variant", [broken_ops.NoValidation], ids=lambda v: v.__name__)
def test_missing_validation_is_caught(variant):
    @_broken(max_examples=100)
    @given(m=malformed_inputs())
    def prop(m):
        check_malformed_refused(variant(), m)

    # Unvalidated, a malformed call goes through, crashes with another type deep inside, or raises
    # without naming the field: the check's AssertionError says which.
    with pytest.raises(AssertionError, match="not refused|not ValueError|error does not"):
        prop()


BROKEN_PATHS = [
    (broken_paths.MropeNotAdvanced, {"mrope": True}),
    (broken_paths.MropeRowZeroOnly, {"mrope": True}),
    (broken_paths.MropeFromScalarPositions, {"mrope": True}),
    (broken_paths.Eagle3NotCombined, {"method": "eagle3"}),
    (broken_paths.Eagle3CombinedEveryStep, {"method": "eagle3"}),
]


@pytest.mark.parametrize("mode", ["eager", pytest.param("full", marks=NEEDS_GRAPHS)])
@pytest.mark.parametrize("variant, fields_", BROKEN_PATHS, ids=[v.__name__ for v, _ in BROKEN_PATHS])
def test_broken_path_is_caught(device, variant, fields_, mode):
    """tests/properties/test_mrope_eagle3.py's early case fails on each broken M-RoPE and eagle3 path."""
    scenario = dataclasses.replace(PATHS_SMALL, graph_mode=mode, **fields_)
    with pytest.raises(AssertionError, match=SERVING_RUN):
        check_scenario(scenario, device, f"broken-{variant.__name__}", proposer_cls=variant)


@pytest.mark.parametrize("variant", [broken_pcp.PaddingRowsWriteKv], ids=lambda v: v.__name__)
def test_a_broken_grouped_proposer_fails_a_group_of_one(device, variant):
    with pytest.raises(AssertionError, match=SERVING_RUN) as failed:
        check_group_of_one(device, variant, ODD_PREFILL, "broken-group-of-one")
    assert f"--pcp 1 --proposer {variant.__module__}:{variant.__name__}" in str(failed.value)


@pytest.mark.parametrize("pad", [broken_tp.pad_truncating], ids=lambda f: f.__name__)
def test_truncating_padding_is_caught(pad):
    """The 0.13-era proposer's F.pad crops a batch larger than the agreed size instead of failing."""
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        check_padding(pad, 9, 8)


@pytest.mark.parametrize("variant", [broken_ops.SlotPlusOne], ids=lambda v: v.__name__)
def test_failure_writes_a_case_that_replays(device, variant, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scenario = Scenario(block_size=2, accept="all", requests=(RequestSpec(0, 7, 12),))
    with pytest.raises(AssertionError, match=SERVING_RUN) as err:
        check_scenario(scenario, device, "replay-me", ops=variant())
    command = str(err.value).split("replay: ")[-1]
    assert (
        command
        == f"python -m sim replay failures/replay-me.json --device {device.name} --ops {variant.__module__}:SlotPlusOne"
    )
    assert Scenario.from_dict(json.loads((tmp_path / "failures/replay-me.json").read_text())) == scenario
    argv = command.split()[3:]
    assert sim_main(argv) == 1
    assert "slot_mapping" in capsys.readouterr().out
    assert sim_main(argv[:4]) == 0  # the core itself passes the same case
