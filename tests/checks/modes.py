"""Graph modes as test parameters: eager on every device, the graph modes only where graphs capture.

A device without graphs skips the graph parameters with the reason (the ``needs`` mark, handled in
conftest.py); it never runs them eagerly in their place, so a green run on such a device says that
only eager was checked.
"""

from __future__ import annotations

import pytest

from tests.checks.example_budget import share

NEEDS_GRAPHS = pytest.mark.needs("supports_graphs")

# One parameter per mode, for a test that runs a fixed case in each.
MODES = [
    pytest.param("eager", id="eager"),
    pytest.param("piecewise", id="piecewise", marks=NEEDS_GRAPHS),
    pytest.param("full", id="full", marks=NEEDS_GRAPHS),
]
GRAPH_ONLY = MODES[1:]

# Two groups, for a property that draws its mode: eager, or a graph mode (drawn) where graphs capture.
MODE_GROUPS = [
    pytest.param(("eager",), id="eager"),
    pytest.param(("piecewise", "full"), id="graphs", marks=NEEDS_GRAPHS),
]


def per_group(divisor: int, at_least: int = 10):
    """``share(divisor)`` split between the two mode groups, so a property keeps its total."""
    return share(divisor * len(MODE_GROUPS), at_least=max(1, at_least // len(MODE_GROUPS)))
