"""What a test is parametrized with, read back: for the guards that every broken variant is exercised."""

from __future__ import annotations

import pytest


def leaves(value):
    """The objects inside one parametrize value (a tuple of arguments, or a ``pytest.param``)."""
    if isinstance(value, type(pytest.param(None))):
        value = value.values
    if isinstance(value, (tuple, list)):
        for item in value:
            yield from leaves(item)
    else:
        yield value
