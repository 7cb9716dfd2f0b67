"""Every broken variant of the code vllm-ascend's MRV2 speculator runs (``speculator_breaks.py``, named in
``broken_gate.VARIANTS``) is exercised by a test of this suite, so that no check loses its teeth on the
speculator unseen (``tests.impls.suites.assert_every_variant_caught``: read off the tests, none run).
"""

from __future__ import annotations

import pytest

from tests.impls import suites
from tests.impls.vllm_ascend_mrv2 import broken_gate

pytestmark = pytest.mark.order(0)  # cheap: nothing runs


def test_every_broken_variant_is_exercised_by_a_test():
    suites.assert_every_variant_caught(__package__, broken_gate.VARIANTS)
