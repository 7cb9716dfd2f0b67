"""``sim``: the proposer on CPU torch, with an NPU's strictness.

Counts every host sync; refuses syncs and pageable copies inside a graph
capture; replays graphs on the captured buffers only (``devices/sim/graph.py``);
keeps host-side graph parameters frozen until updated; and leaves the target
of a non-blocking device->host copy poisoned until it is synchronized.

What is poisoned: the ``out`` of ``to_host(src, out, non_blocking=True)`` holds
``poison_value`` (NaN, or the dtype's most negative value) until ``synchronize()``
or the returned event's ``synchronize()`` lands the copy (``_land``); with
``devices.sim.early_reads`` on (``tracking``), so does the destination of a
non-blocking device->host copy made by any code with plain torch
(``t.to("cpu", non_blocking=True)``, ``host.copy_(t, non_blocking=True)``), told
from a host->device one by the source's provenance, through the same
``to_host``. What is not: a blocking copy, a non-blocking host->device or
device->device copy (stream-ordered before the work that reads it), and a
plain-torch copy made while no tracker is on.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from devices.sim.graph import capture as _capture
from devices.sim.host_params import host_param_op
from devices.sync_watch import watch_host_syncs


def poison_value(dtype: torch.dtype):
    """What an unsynchronized host buffer holds: NaN, or the dtype's most negative value (an unsigned
    dtype's largest: its smallest, 0, is a common real value). A bool has no value that cannot be the
    copy's: it holds the negation of what will land (``poison``)."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        raise ValueError("torch.bool: no value is never a real one; the poison is the negation of the copy (poison)")
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max


def poison(out: torch.Tensor, src: torch.Tensor) -> None:
    """Fill ``out``, the destination of a copy of ``src`` not landed yet, so that reading it early shows:
    ``poison_value``, or for a bool the negation of ``src`` (every element differs from what lands)."""
    if out.dtype == torch.bool:
        out.copy_(torch.logical_not(src))
    else:
        out.fill_(poison_value(out.dtype))


class SimEvent:
    """Completes the copies queued before it when synchronized."""

    def __init__(self, device: SimDevice, upto: int):
        self.device, self.upto = device, upto

    def synchronize(self) -> None:
        self.device._land(self.upto)


class SimDevice:
    """CPU device that behaves like an accelerator where it matters to correctness."""

    name = "sim"
    supports_graphs = True
    supports_param_update = True
    poisons_unsynced_copies = True
    # An index out of range raises IndexError and the process goes on (an accelerator's device-side
    # assert ends every later kernel of the process instead).
    survives_bad_indices = True
    max_ranks = 64  # PCP ranks are CPU processes

    def __init__(self, intra_op_threads: int = 1) -> None:
        self.torch_device = torch.device("cpu")
        # The simulator's tensors are tiny: one intra-op thread is the fastest
        # (no fork/join per op) and gives run-to-run identical float results.
        torch.set_num_threads(intra_op_threads)
        self._pending: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self._copies = 0

    def describe(self) -> str:
        return f"sim (CPU reference simulator, torch {torch.__version__})"

    def synchronize(self) -> None:
        self._land(self._copies)

    def _land(self, upto: int) -> None:
        self.land_where(lambda n: n <= upto)

    def land_where(self, landed) -> None:
        """Land the pending copies whose number (``SimEvent.upto`` of the copy) ``landed`` accepts:
        what a stream-ordered synchronize sees (``devices.sim.streams``)."""
        keep = []
        for n, dst, src in self._pending:
            if landed(n):
                with torch.inference_mode():  # a copy lands whatever mode the host is in (its buffer may be one's)
                    dst.copy_(src)
            else:
                keep.append((n, dst, src))
        self._pending = keep

    def event(self) -> SimEvent:
        """An event recorded now: synchronized, it lands the copies issued before it."""
        return SimEvent(self, self._copies)

    def pinned(self, shape, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype)

    def to_host(self, src: torch.Tensor, out: torch.Tensor, non_blocking: bool = False) -> SimEvent:
        self._copies += 1
        if not non_blocking:
            out.copy_(src)
        else:
            self._pending.append((self._copies, out, src.clone()))
            poison(out, src)
        return SimEvent(self, self._copies)

    def graph_pool(self):
        return object()

    @contextmanager
    def capture(self, size: int, pool=None, inputs: dict[str, torch.Tensor] | None = None):
        with _capture(size, inputs) as graph:
            yield graph

    def host_param(self, name: str, values: list[int]) -> torch.Tensor:
        return host_param_op(name, [int(v) for v in values])

    def watch_host_syncs(self, forbid: str | None = None):
        return watch_host_syncs(forbid)
