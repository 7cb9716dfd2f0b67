"""Deliberately lax simulators: each forgives one thing an NPU does not.

The device contract (tests/properties/test_device_contract.py) must fail on every one,
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


class _PatchedGraphs(SimDevice):
    """A simulator whose captured graphs get ``patch``-ed once the capture ends."""

    @contextmanager
    def capture(self, size, pool=None, inputs=None):
        with super().capture(size, pool, inputs) as graph:
            yield graph
        self.patch(graph)

    def patch(self, graph) -> None:
        raise NotImplementedError


class ParamsIgnoreUpdates(_PatchedGraphs):
    """``update_params`` does nothing: a graph keeps its capture-time lengths."""

    def patch(self, graph):
        graph.update_params = lambda **values: None


class ReplayDoesNothing(_PatchedGraphs):
    """A replay that re-executes nothing: outputs keep their capture-time values."""

    def patch(self, graph):
        graph.ops.clear()


class ReplaysAtAnySize(_PatchedGraphs):
    """A replay that accepts any size (padding to a size never captured goes unseen)."""

    def patch(self, graph):
        replay = graph.replay
        graph.replay = lambda size, inputs=None: replay(graph.size, inputs)


class BlockingCopyDeferred(SimDevice):
    """Even a blocking device->host copy lands only at the next synchronize."""

    def to_host(self, src, out, non_blocking=False):
        return super().to_host(src, out, non_blocking=True)


class SyncsNotCounted(SimDevice):
    """Host syncs go uncounted (the padded path's zero-sync property would pass vacuously)."""

    def watch_host_syncs(self, forbid=None):
        from devices.sync_watch import SyncLog

        @contextmanager
        def nothing():
            yield SyncLog()

        return nothing()


def all_gather_rank_reversed(tensor):
    """An all-gather that concatenates the ranks in reverse order."""
    from devices.collectives import all_gather_rows

    world = torch.distributed.get_world_size()
    return torch.cat(list(reversed(all_gather_rows(tensor).chunk(world))))
