"""The core's input preparation equals the from-scratch reference (docs/DESIGN.md steps 1-4)."""

from __future__ import annotations

import pytest
from hypothesis import example, given

from tests.checks import core_checks
from tests.checks.modes import PADDING, USES_DRAFT_MODEL, USES_HOST_SYNC_COUNT
from tests.strategies.batches import WIDE, batch_cases

pytestmark = pytest.mark.order(0)  # cheap and sensitive: a broken core fails here first


@pytest.mark.parametrize("padded", PADDING)
@given(case=batch_cases())
@example(case=WIDE)  # first, unshrunk: a fixed batch past the kernels' first lap
def test_first_pass_matches_reference(device, impl, padded, case):
    core_checks.check_first_pass(impl.ops, case, padded, device, impl.rules)


@pytest.mark.parametrize("padded", PADDING)
@given(case=batch_cases())
@example(case=WIDE)  # first, unshrunk: a fixed batch past the kernels' first lap
def test_draft_steps_match_reference(device, impl, padded, case):
    core_checks.check_steps(impl.ops, case, padded, device, impl.rules)


@given(case=batch_cases())
@example(case=WIDE)  # first, unshrunk: a fixed batch past the kernels' first lap
def test_padded_and_unpadded_agree(device, impl, case):
    core_checks.check_padded_matches_unpadded(impl.ops, case, device, impl.rules)


@USES_HOST_SYNC_COUNT
@given(case=batch_cases())
@example(case=WIDE)  # first, unshrunk: a fixed batch past the kernels' first lap
def test_padded_path_makes_no_host_sync(device, impl, case):
    core_checks.check_padded_path_never_syncs(impl.ops, case, device, impl.host_reads)


# A draft model's first pass (one more row per request, nothing shifted) and the steps that go on from it.
@USES_DRAFT_MODEL
@pytest.mark.parametrize("padded", PADDING)
@given(case=batch_cases(method="draft_model"))
def test_draft_model_first_pass_matches_reference(device, impl, padded, case):
    core_checks.check_first_pass(impl.ops, case, padded, device, impl.rules)


@USES_DRAFT_MODEL
@pytest.mark.parametrize("padded", PADDING)
@given(case=batch_cases(method="draft_model"))
def test_draft_model_steps_match_reference(device, impl, padded, case):
    core_checks.check_steps(impl.ops, case, padded, device, impl.rules)


@USES_DRAFT_MODEL
@USES_HOST_SYNC_COUNT
@given(case=batch_cases(method="draft_model"))
def test_draft_model_padded_path_makes_no_host_sync(device, impl, case):
    core_checks.check_padded_path_never_syncs(impl.ops, case, device, impl.host_reads)
