"""Malformed inputs are refused with a ValueError naming the field and the value."""

from __future__ import annotations

import pytest
from hypothesis import given

from tests.strategies.malformed import malformed_inputs

pytestmark = pytest.mark.order(0)


def check_malformed_refused(ops, m) -> None:
    with pytest.raises(ValueError) as err:
        ops.prepare_call(m.config, m.batch, m.sampled)
    assert m.field in str(err.value), f"{m.mutation}: error does not name {m.field!r}: {err.value}"
    assert "=" in str(err.value), f"{m.mutation}: error does not show the value: {err.value}"
    assert m.says in str(err.value), f"{m.mutation}: error does not say {m.says!r}: {err.value}"


@given(m=malformed_inputs())
def test_malformed_input_names_the_field(impl, m):
    check_malformed_refused(impl.ops, m)
