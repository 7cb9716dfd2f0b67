"""Every broken variant of vllm-ascend's code (``*_breaks.py``, named in ``broken_gate.VARIANTS``, and the
shared kernel and later-steps breaks) is exercised by a test of this suite, so that no check loses its
teeth on vllm-ascend unseen (``tests.impls.suites.assert_every_variant_caught``: read off the tests, none run).
"""

from __future__ import annotations

import pytest

from tests.impls import broken_kernels, suites
from tests.impls.vllm_ascend import broken_gate

pytestmark = pytest.mark.order(0)  # cheap: nothing runs


def test_every_broken_variant_is_exercised_by_a_test():
    suites.assert_every_variant_caught(
        __package__,
        {**broken_gate.VARIANTS, **broken_gate.CONTROLS},
        (broken_kernels, suites.later_steps_fed_rolled_hidden_rows),
    )


def test_a_variant_no_test_exercises_is_reported(monkeypatch):
    """The check above fails, naming the variant, on a break no test names (here: one more in ``method_breaks``)."""
    from tests.impls.vllm_ascend import method_breaks

    def never_used(original):
        return original

    never_used.__module__, never_used.__qualname__ = method_breaks.__name__, "never_used"
    monkeypatch.setattr(method_breaks, "never_used", never_used, raising=False)
    with pytest.raises(AssertionError, match=r"method_breaks:never_used"):
        test_every_broken_variant_is_exercised_by_a_test()
