"""``torch.npu``'s graph API on the CPU simulator's recorder (``devices.sim.graph``).

The fake ``torch_npu`` installs these names on ``torch.npu`` (and ``torch_npu.npu``) so that
vllm-ascend's own graph code runs on CPU: ``ACLGraphWrapper`` (``torch.npu.NPUGraph``,
``torch.npu.graph(g, pool=...)``, ``NPUGraph.replay()``, ``torch.npu.graph_pool_handle()``) and
the attention backends' capture and ``update_graph_params`` (``graph_task_group_begin/end``,
``graph_task_update_begin/end``, ``ExternalEvent``, ``torch.npu.stream``). ``torch.npu.synchronize()``,
a stream's ``synchronize()`` and a ``torch.npu.Event`` recorded after a copy land the simulator's
non-blocking device->host copies, poisoned until then (``devices.sim.early_reads``). As on an NPU:

- a capture records every aten op run inside it; a replay re-runs them on the captured tensors,
  so a name rebound to a fresh tensor is not seen, and Python values passed to ops stay frozen;
- a graph replays only at the size it was captured at: the token count vllm-ascend's forward
  context names (``forward_context.num_tokens``, what ``set_ascend_forward_context`` is told);
  a replay at another size raises ``GraphError``;
- a host sync inside a capture raises ``HostSyncError`` (the recorder's rule);
- ops issued between ``graph_task_group_begin(stream)`` and ``graph_task_group_end(stream)`` form
  a task; ``graph_task_group_end`` returns its handle. Between ``graph_task_update_begin(stream,
  handle)`` and ``graph_task_update_end(stream)`` the ops issued are not run: each rewrites the
  arguments of the task's next captured op of the same kind, which is how a captured kernel's
  host-side parameters change (``update_full_graph_params``). Nothing else changes them.

Events order the update stream before the graph's tasks, as on an NPU: an ``ExternalEvent`` waited
on inside a capture becomes a dependency of the graph; a replay is launched, and runs once every
such event has been recorded since the launch (vllm-ascend updates the task parameters after
launching the replay, and the captured tasks wait for the update's ``event.record``). Its work is
the launching stream's, ordered after what each event's stream had issued at its record: it runs
on that stream (``devices.sim.streams``), whichever stream is current when the last event is
recorded, and the launching stream's later work is ordered after the updates. A
``synchronize`` with a launched replay still waiting raises ``GraphError``: on an NPU the stream
would wait forever on an event nobody records.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from devices.base import GraphError
from devices.sim import early_reads, streams
from devices.sim import graph as sim_graph

UNSIZED = -1  # a graph captured outside any forward (MRV2's, around several): replayed outside any too
_capturing: list[NPUGraph] = []  # the graph being captured (at most one: captures do not nest)
_launched: list[NPUGraph] = []  # replays launched, waiting on events


def _forward_size() -> int | None:
    """The padded token count of the current forward (vLLM's forward context), or None outside one."""
    context = sys.modules.get("vllm.forward_context")
    if context is None or not context.is_forward_context_available():
        return None
    return getattr(context.get_forward_context(), "num_tokens", None)


class NPUGraph:
    """One captured graph: a ``SimGraph``, the size it was captured at, the events its tasks wait on,
    and callbacks run after each replay (``after_replay``)."""

    def __init__(self):
        self.sim: sim_graph.SimGraph | None = None
        self.size: int | None = None
        self.replays = 0
        self.inference = False
        self.waits: list[ExternalEvent] = []
        self.after_replay: list = []
        self._launched: _Launch | None = None

    def replay(self) -> None:
        """Launch a replay at the current forward's size: it runs when its events are recorded."""
        if self.sim is None:
            raise GraphError("NPUGraph.replay() before any capture")
        if self._launched is not None:
            raise GraphError("NPUGraph.replay() while its last replay still waits on its events")
        size = _forward_size()
        size = self.size if size is None else size
        if size != self.size:  # refused at launch, as a graph of other shapes cannot be launched
            raise GraphError(f"replay at size {size}, but this graph was captured at size {self.size}")
        self._launched = _Launch(size, {id(e) for e in self.waits}, streams.current())
        _launched.append(self)
        self._maybe_run()

    def _event_recorded(self, event: ExternalEvent, clock: dict) -> None:
        if self._launched is not None and id(event) in self._launched.pending:
            self._launched.pending.discard(id(event))
            self._launched.stream.wait_clock(clock)  # the tasks wait for the update's record
            self._maybe_run()

    def _maybe_run(self) -> None:
        launch = self._launched
        if launch.pending:
            return
        self._launched = None
        _launched.remove(self)
        with streams.using(launch.stream):
            with torch.inference_mode(self.inference):  # the mode its tensors were made in
                self.sim.replay(launch.size)
            self.replays += 1
            for callback in self.after_replay:
                callback()

    def reset(self) -> None:
        self.sim = None


@dataclass
class _Launch:
    """A launched replay: its size, the events it still waits on, the stream it was launched on."""

    size: int
    pending: set
    stream: streams.SimStream


@contextlib.contextmanager
def graph(npu_graph: NPUGraph, pool=None, stream=None, capture_error_mode=None, **_):
    """Capture the block into ``npu_graph`` (``torch.npu.graph``); refuses a nested capture."""
    if _capturing:
        raise GraphError("a graph capture inside another capture")
    size = _forward_size()
    npu_graph.size = UNSIZED if size is None else size
    npu_graph.inference = torch.is_inference_mode_enabled()
    _capturing.append(npu_graph)
    try:
        with sim_graph.capture(npu_graph.size) as sim:
            npu_graph.sim = sim
            yield npu_graph
    finally:
        _capturing.pop()


def graph_pool_handle() -> tuple[str]:
    return ("sim-graph-pool",)  # one memory: a pool is a name


def is_current_stream_capturing() -> bool:
    return bool(_capturing)


def capturing_graph() -> NPUGraph | None:
    """The graph being captured, or None."""
    return _capturing[-1] if _capturing else None


@dataclass
class TaskHandle:
    """The ops ``[start, end)`` of one captured graph: one task (a kernel and what it issued)."""

    graph: NPUGraph
    start: int
    end: int = -1
    updates: int = 0

    def ops(self) -> list:
        return self.graph.sim.ops[self.start : self.end]


@dataclass
class _Tasks:
    open: TaskHandle | None = None
    updating: list = field(default_factory=list)  # [(handle, mode)]


_tasks = _Tasks()


def graph_task_group_begin(stream=None) -> None:
    if not _capturing:
        raise GraphError("graph_task_group_begin outside a graph capture")
    if _tasks.open is not None:
        raise GraphError("graph_task_group_begin inside an open task")
    g = _capturing[-1]
    _tasks.open = TaskHandle(g, len(g.sim.ops))


def graph_task_group_end(stream=None) -> TaskHandle:
    handle = _tasks.open
    if handle is None:
        raise GraphError("graph_task_group_end without graph_task_group_begin")
    handle.end = len(handle.graph.sim.ops)
    _tasks.open = None
    return handle


class _TaskUpdate(TorchDispatchMode):
    """Each op issued rewrites the arguments of the task's next captured op of the same kind and
    returns that op's captured output; nothing runs."""

    def __init__(self, handle: TaskHandle):
        super().__init__()
        self.handle = handle
        self.next = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ops = self.handle.ops()
        while self.next < len(ops) and ops[self.next][0] is not func:
            self.next += 1
        if self.next >= len(ops):
            raise GraphError(f"{func} issued in a task update: the captured task has no such op left")
        op = ops[self.next]
        op[1], op[2] = list(args), dict(kwargs or {})
        self.next += 1
        return op[3]


def graph_task_update_begin(stream, handle: TaskHandle) -> None:
    if not isinstance(handle, TaskHandle) or handle.end < 0:
        raise GraphError(f"graph_task_update_begin: {handle!r} is not a captured task's handle")
    mode = _TaskUpdate(handle)
    mode.__enter__()
    _tasks.updating.append((handle, mode))


def graph_task_update_end(stream=None) -> None:
    if not _tasks.updating:
        raise GraphError("graph_task_update_end without graph_task_update_begin")
    handle, mode = _tasks.updating.pop()
    mode.__exit__(None, None, None)
    handle.updates += 1


class ExternalEvent:
    """An event between the update stream and a graph: waited on inside a capture, it holds that
    graph's replays until recorded."""

    def record(self, stream=None) -> None:
        clock = (stream or streams.current()).clock()
        for g in list(_launched):
            g._event_recorded(self, clock)

    def wait(self, stream=None) -> None:
        if _capturing:
            _capturing[-1].waits.append(self)

    def reset(self, stream=None) -> None: ...


class Event(streams.SimStreamEvent):
    """``torch.npu.Event``: recorded on a stream (the current one by default), it holds what that stream
    had issued; synchronized, the host sees that work done, and the simulator's non-blocking
    device->host copies ordered before the record land (``devices.sim.streams``); never recorded, it
    waits for nothing. ``wait(stream)`` orders the recorded work before ``stream``'s later work."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def synchronize(self) -> None:
        if self.clock is not None:
            early_reads.land(self.clock)

    def query(self) -> bool:
        self.synchronize()
        return True


def synchronize(device=None) -> None:
    """Wait for the launched replays (one still waiting on an event would wait forever), then land
    the simulator's pending non-blocking device->host copies (``devices.sim.early_reads``)."""
    _wait_for_replays()
    early_reads.land_all()


def _wait_for_replays() -> None:
    if _launched:
        g = _launched[0]
        raise GraphError(
            f"a replay of the graph captured at size {g.size} waits on {len(g._launched.pending)} event(s) that were "
            "never recorded: its captured tasks' parameters were not updated (update_full_graph_params)"
        )


class Stream(streams.SimStream):
    """A stream (``devices.sim.streams``): work runs in issue order on the CPU, and what an NPU would
    order between streams is checked (a copy reading another stream's write with no wait between)."""

    def __init__(self, *args, name: str | None = None, **kwargs):
        super().__init__(name or f"side stream {next(_stream_numbers)}")

    def synchronize(self) -> None:
        _wait_for_replays()
        early_reads.land(self.clock())

    def wait_event(self, event) -> None:
        if isinstance(event, Event):
            event.wait(self)

    def record_event(self, event=None):
        return event or ExternalEvent()


_stream_numbers = itertools.count(1)


def current_stream(device=None) -> Stream:
    return streams.current()


def set_stream(s) -> None:
    """``torch.npu.set_stream(s)``: work issued from here on runs on ``s``."""
    streams.set_current(s)


@contextlib.contextmanager
def stream(s=None):
    """``torch.npu.stream(s)``: work issued inside runs on ``s`` (None: the current stream)."""
    if s is None:
        yield s
        return
    with streams.using(s):
        yield s


API = {
    "NPUGraph": NPUGraph,
    "graph": graph,
    "graph_pool_handle": graph_pool_handle,
    "is_current_stream_capturing": is_current_stream_capturing,
    "graph_task_group_begin": graph_task_group_begin,
    "graph_task_group_end": graph_task_group_end,
    "graph_task_update_begin": graph_task_update_begin,
    "graph_task_update_end": graph_task_update_end,
    "ExternalEvent": ExternalEvent,
    "Event": Event,
    "Stream": Stream,
    "current_stream": current_stream,
    "stream": stream,
    "set_stream": set_stream,
    "synchronize": synchronize,
}


def weak_ref_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """``torch_npu._C._weak_ref_tensor``: a tensor over the same memory that does not keep it alive;
    here the tensor itself (the CPU frees nothing a replay still writes)."""
    return tensor


def install_on(*namespaces) -> None:
    """Set the graph API on each namespace (``torch.npu``, ``torch_npu.npu``), and its default stream."""
    streams.set_default(Stream(name="the default stream"))
    for ns in namespaces:
        for name, value in API.items():
            setattr(ns, name, value)


def reset() -> None:
    """Forget an open task or update left by a failed call (tests)."""
    _tasks.open = None
    while _tasks.updating:
        graph_task_update_end()
    _capturing.clear()
    for g in _launched:
        g._launched = None
    _launched.clear()
