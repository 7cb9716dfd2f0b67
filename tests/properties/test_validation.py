"""Malformed inputs are refused with a ValueError naming the field and the value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checks.example_budget import share
from tests.strategies.malformed import MUTATIONS, malformed_inputs

pytestmark = pytest.mark.order(0)


def check_malformed_refused(ops, m) -> None:
    with pytest.raises(ValueError) as err:
        ops.prepare_call(m.config, m.batch, m.sampled)
    assert str(err.value).startswith(m.field), f"{m.mutation}: error does not begin with {m.field!r}: {err.value}"
    assert "=" in str(err.value), f"{m.mutation}: error does not show the value: {err.value}"
    assert m.says in str(err.value), f"{m.mutation}: error does not say {m.says!r}: {err.value}"


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__.strip("_"))
@share(len(MUTATIONS))
@given(data=st.data())
def test_malformed_input_names_the_field(impl, mutation, data):
    """Each way of breaking a batch draws its own examples (the profile's count shared among them):
    drawn from one pool, ten examples under ``mutate`` would leave most of them out."""
    check_malformed_refused(impl.ops, data.draw(malformed_inputs(mutation)))
