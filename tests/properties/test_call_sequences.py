"""Several propose calls in a row on one proposer, each as if it were the first.

Batches of different sizes, block-table widths and sampled-token modes, in
eager, piecewise or full graph mode (tests/checks/sequence_checks.py says what is
compared and why single-call properties cannot see it).
"""

from __future__ import annotations

import pytest
from hypothesis import given

from mtp.proposer import MtpProposer
from tests.checks import sequence_checks
from tests.strategies.sequences import call_sequences

pytestmark = pytest.mark.order(1)


def _on(device, seq):
    return seq if device.supports_graphs else seq._replace(mode="eager")


@given(seq=call_sequences())
def test_calls_in_sequence_are_each_as_if_first(device, impl, seq):
    """Each call equals the reference and a fresh proposer; returned drafts survive later calls."""
    sequence_checks.check_calls_in_sequence(impl.proposer_cls or MtpProposer, _on(device, seq), device, ops=impl.ops)
