"""Deliberately lax simulators: each forgives one thing an NPU does not.

The device contract (tests/test_device_contract.py) must fail on every one,
or the simulator could let that class of graph bug through.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from devices.sim.device import SimDevice
from devices.sim.graph import SimGraph
from devices.sync_watch import watch_host_syncs


class CopiesLandAtOnce(SimDevice):
    """A non-blocking device->host copy is readable before its event (bug class 6 hides)."""

    def to_host(self, src, out, non_blocking=False):
        return super().to_host(src, out, non_blocking=False)


class SyncsAllowedInCapture(SimDevice):
    """A capture that lets host syncs through (they would fail or hang on hardware)."""

    @contextmanager
    def capture(self, size, pool=None, inputs=None):
        graph = SimGraph(size, inputs)
        with watch_host_syncs(), torch.no_grad():
            yield graph


class InputsNotChecked(SimDevice):
    """Replay ignores moved inputs (bug class 11 hides)."""

    @contextmanager
    def capture(self, size, pool=None, inputs=None):
        with super().capture(size, pool, None) as graph:
            yield graph


class ParamsIgnoreUpdates(SimDevice):
    """``update_params`` does nothing: a graph keeps its capture-time lengths."""

    @contextmanager
    def capture(self, size, pool=None, inputs=None):
        with super().capture(size, pool, inputs) as graph:
            graph.update_params = lambda **values: None
            yield graph


def all_gather_rank_reversed(tensor):
    """An all-gather that concatenates the ranks in reverse order."""
    from devices.collectives import all_gather_rows

    world = torch.distributed.get_world_size()
    return torch.cat(list(reversed(all_gather_rows(tensor).chunk(world))))
