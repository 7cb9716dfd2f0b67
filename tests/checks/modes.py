"""Graph modes and padding as test parameters: what each needs of the device and uses of the implementation.

A device without graphs skips the graph parameters with the reason (the ``needs`` mark); it never runs
them eagerly in their place, so a green run on such a device says that only eager was checked. An
implementation that lacks a mode or the unpadded path (``sim.impls.features``) skips the parameters
that use it (the ``uses`` mark), with its own reason, in the properties that run it. Both marks are
handled by the gate's plugin (tests/plugin.py).
"""

from __future__ import annotations

import pytest

from sim.impls.features import Feature
from tests.checks.example_budget import share

NEEDS_GRAPHS = pytest.mark.needs("supports_graphs")
USES_PIECEWISE = pytest.mark.uses(Feature.PIECEWISE_GRAPHS)
USES_UNPADDED = pytest.mark.uses(Feature.UNPADDED)
USES_FULL_GRAPHS = pytest.mark.uses(Feature.FULL_GRAPHS)
USES_DUMMY_RUN = pytest.mark.uses(Feature.DUMMY_RUN)
USES_HOST_SYNC_COUNT = pytest.mark.uses(Feature.HOST_SYNC_COUNT)
USES_DRAFT_ATTN_GROUPS = pytest.mark.uses(Feature.DRAFT_ATTN_GROUPS)
USES_MLA_DRAFT = pytest.mark.uses(Feature.MLA_DRAFT)
USES_SFA_DRAFT = pytest.mark.uses(Feature.SFA_DRAFT)
USES_EAGLE = pytest.mark.uses(Feature.EAGLE)
USES_EAGLE3 = pytest.mark.uses(Feature.EAGLE3)
USES_DRAFT_MODEL = pytest.mark.uses(Feature.DRAFT_MODEL)
USES_MROPE = pytest.mark.uses(Feature.MROPE)
USES_ASYNC_SCHEDULING = pytest.mark.uses(Feature.ASYNC_SCHEDULING)
USES_RUNNER_SAMPLES = pytest.mark.uses(Feature.RUNNER_SAMPLES)
USES_VLLM_SCHEDULER = pytest.mark.uses(Feature.VLLM_SCHEDULER)
USES_KERNEL_BLOCKS = pytest.mark.uses(Feature.KERNEL_BLOCKS)
USES_REDUCE_SAMPLE = pytest.mark.uses(Feature.REDUCE_SAMPLE)  # vllm-ascend's TP suites

# One parameter per mode, for a test that runs a fixed case in each.
MODES = [
    pytest.param("eager", id="eager"),
    pytest.param("piecewise", id="piecewise", marks=[NEEDS_GRAPHS, USES_PIECEWISE]),
    pytest.param("full", id="full", marks=[NEEDS_GRAPHS, USES_FULL_GRAPHS]),
]
GRAPH_ONLY = MODES[1:]

# Padded and unpadded input, for a property of both of an implementation's paths.
PADDING = [
    pytest.param(True, id="padded"),
    pytest.param(False, id="unpadded", marks=USES_UNPADDED),
]

# Two groups, for a property that draws its mode: eager, or a graph mode (drawn) where graphs capture.
MODE_GROUPS = [
    pytest.param(("eager",), id="eager"),
    pytest.param(("piecewise", "full"), id="graphs", marks=NEEDS_GRAPHS),
]


def per_group(divisor: int, at_least: int = 10):
    """``share(divisor)`` split between the two mode groups, so a property keeps its total."""
    return share(divisor * len(MODE_GROUPS), at_least=max(1, at_least // len(MODE_GROUPS)))
