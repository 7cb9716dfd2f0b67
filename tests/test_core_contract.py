"""Parts of the core's input contract that the reference does not model.

Run by the gate (`tox -e sim`), not by the `--impl vllm` / `--impl vllm_ascend`
envs: whether an upstream proposer honours them is for its adapter to pin.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from tests import core_checks
from tests.strategies.batches import batch_cases

pytestmark = pytest.mark.order(0)


@given(case=batch_cases())
def test_discarded_samples_are_ignored(device, impl, case):
    """A discarded request's sample listed anyway (vLLM may hand it) changes nothing."""
    core_checks.check_discarded_samples_ignored(impl.ops, case, device)


@given(case=batch_cases())
def test_int64_sampled_ids_are_accepted(device, impl, case):
    core_checks.check_int64_padded_ids_accepted(impl.ops, case, device)
