"""Several propose calls in a row on one proposer, each as if it were the first.

Batches of different sizes, block-table widths and sampled-token modes, in
eager, piecewise or full graph mode (tests/checks/sequence_checks.py says what is
compared and why single-call properties cannot see it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mtp.proposer import MtpProposer
from tests.checks import sequence_checks
from tests.checks.modes import MODE_GROUPS, per_group
from tests.strategies.sequences import call_sequences

pytestmark = pytest.mark.order(1)


@pytest.mark.parametrize("modes", MODE_GROUPS)
@per_group(1)
@given(data=st.data())
def test_calls_in_sequence_are_each_as_if_first(device, impl, modes, data):
    """Each call equals the reference and a fresh proposer; returned drafts survive later calls."""
    seq = data.draw(call_sequences(modes=modes), label="seq")
    sequence_checks.check_calls_in_sequence(impl.proposer_cls or MtpProposer, seq, device, ops=impl.ops)
