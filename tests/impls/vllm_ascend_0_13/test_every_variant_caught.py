"""Every broken variant of 0.13.0's code (``method_breaks.py``, and the shared kernel and later-steps
breaks) is exercised by a test of this suite, so that no check loses its teeth on 0.13.0 unseen
(``tests.impls.suites.assert_every_variant_caught``: read off the tests, none run).
"""

from __future__ import annotations

import pytest

from tests.impls import broken_kernels, suites

pytestmark = pytest.mark.order(0)  # cheap: nothing runs


def test_every_broken_variant_is_exercised_by_a_test():
    suites.assert_every_variant_caught(__package__, shared=(broken_kernels, suites.later_steps_fed_rolled_hidden_rows))
