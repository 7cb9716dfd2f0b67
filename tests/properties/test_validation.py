"""Malformed inputs are refused with a ValueError naming the field and the value."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.checks.example_budget import share
from tests.strategies.malformed import MUTATIONS, malformed_inputs

pytestmark = pytest.mark.order(0)


def check_malformed_refused(ops, m) -> None:
    """The malformed call raises ``ValueError`` naming the field, the value and the rule; anything else
    (no error, or another type from deep inside) is an ``AssertionError`` that says what happened."""
    try:
        ops.prepare_call(m.config, m.batch, m.sampled)
    except ValueError as exc:
        err = str(exc)
    except Exception as exc:  # noqa: BLE001 - any other type is the finding; named, with its message
        raise AssertionError(f"{m.mutation}: refused with {type(exc).__name__}, not ValueError: {exc}") from exc
    else:
        raise AssertionError(f"{m.mutation}: not refused")
    assert err.startswith(m.field), f"{m.mutation}: error does not begin with {m.field!r}: {err}"
    assert "=" in err, f"{m.mutation}: error does not show the value: {err}"
    assert m.says in err, f"{m.mutation}: error does not say {m.says!r}: {err}"


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.__name__.strip("_"))
@share(len(MUTATIONS))
@given(data=st.data())
def test_malformed_input_names_the_field(impl, mutation, data):
    """Each way of breaking a batch draws its own examples (the profile's count shared among them):
    drawn from one pool, ten examples under ``mutate`` would leave most of them out."""
    check_malformed_refused(impl.ops, data.draw(malformed_inputs(mutation)))
