"""Streams and events on the simulator, ordered as an NPU orders them.

On the CPU every op runs when it is issued, so nothing can race by itself; this module keeps the
order an accelerator would keep and names what breaks it. Each stream carries a vector clock: for
every stream, the last of its work ordered before this stream's next work. Work is stamped with a
global tick as it is issued.

- ``wait_stream(other)`` orders everything issued on ``other`` so far before the waiting stream's
  later work; ``wait_event(event)`` orders what the event's stream had issued (and had waited for)
  at its ``record``. Nothing else orders two streams.
- A non-blocking device->host copy issued on stream S reads its source where S can see it: if the
  source was last written by work on another stream that S has not waited for, the copy may read it
  before it is written, and ``StreamOrderError`` names the copy's stream, the writer's and the source.
- The host sees a copy land when it synchronizes with the copy's stream past the copy: an event
  recorded after it on that stream (or on one that waited for it), synchronized; that stream's own
  ``synchronize``; or a device-wide one. An event recorded on another stream lands none of it.

``StreamOrder`` is the state of one traced call (each ``early_reads.tracking`` has one): the
stamps of device tensors' writes and the copies not landed. Streams themselves (``SimStream``) live
as long as the code under test keeps them (a runner's copy stream is made once). A ``SimStream`` is a
``torch.Stream`` (of the host), so torch's own functions that take a stream argument parse it
(``Tensor.record_stream``, which ``early_reads`` serves), compared by identity as streams are.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import torch

_ticks = itertools.count(1)


class StreamOrderError(RuntimeError):
    """Work on one stream read what another stream wrote, with no wait between them."""


def tick() -> int:
    return next(_ticks)


class SimStream(torch.Stream):
    """A stream: its name (for messages) and its vector clock (stream -> last tick ordered before).
    Two streams are the same stream only if they are one object (``torch.Stream`` compares the host's
    stream ids, which every host stream shares)."""

    __eq__, __ne__, __hash__ = object.__eq__, object.__ne__, object.__hash__

    def __new__(cls, *args, **kwargs):
        return super().__new__(cls, device="cpu")

    def __init__(self, name: str = "a side stream"):
        self.name = name
        self.seen: dict[SimStream, int] = {}

    def __repr__(self) -> str:
        return f"<stream {self.name}>"

    def clock(self) -> dict[SimStream, int]:
        """What is ordered before this stream's next work: its own work so far and what it waited for."""
        return {**self.seen, self: tick()}

    def wait_clock(self, clock: dict[SimStream, int]) -> None:
        for stream, t in clock.items():
            if stream is not self and self.seen.get(stream, 0) < t:
                self.seen[stream] = t

    def wait_stream(self, other: SimStream) -> None:
        self.wait_clock(other.clock())

    def orders(self, stream: SimStream, t: int) -> bool:
        """Whether work issued on ``stream`` at tick ``t`` is ordered before this stream's next work."""
        return stream is self or self.seen.get(stream, 0) >= t


_current: list[SimStream] = [SimStream("the default stream")]


def current() -> SimStream:
    return _current[-1]


def set_default(stream: SimStream) -> None:
    """Make ``stream`` the default stream: a fake runtime's own stream object (``torch.npu``'s)."""
    _current[0] = stream


def set_current(stream: SimStream) -> None:
    """``torch.npu.set_stream(s)``: work issued from here on runs on ``stream``, until the current stream is set
    again (or the ``using`` block it was set in ends)."""
    _current[-1] = stream


@contextmanager
def using(stream: SimStream):
    """``torch.npu.stream(s)``: work issued inside runs on ``stream``."""
    _current.append(stream)
    try:
        yield stream
    finally:
        _current.pop()


class SimStreamEvent:
    """An event: recorded on a stream, it holds that stream's clock at the record."""

    def __init__(self):
        self.clock: dict[SimStream, int] | None = None

    def record(self, stream: SimStream | None = None) -> None:
        self.clock = (stream or current()).clock()

    def wait(self, stream: SimStream | None = None) -> None:
        if self.clock is not None:
            (stream or current()).wait_clock(self.clock)


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class StreamOrder:
    """One traced call's stream order: who last wrote each device tensor's memory, the copies in
    flight, and what the host has synchronized with (``land`` asks the simulator to land those)."""

    def __init__(self, sim):
        self.sim = sim
        self.writes: dict[int, tuple[SimStream, int]] = {}  # storage -> (stream, tick) of its last write
        self.copies: dict[int, tuple[SimStream, int]] = {}  # the simulator's copy number -> (stream, tick)

    def wrote(self, t: torch.Tensor) -> None:
        self.writes[_storage(t)] = (current(), tick())

    def copy_to_host(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """A non-blocking device->host copy of ``src`` issued now, on the current stream."""
        stream = current()
        writer = self.writes.get(_storage(src))
        if writer is not None and not stream.orders(*writer):
            raise StreamOrderError(
                f"a non-blocking copy to the host on {stream.name} reads a device tensor "
                f"(shape {tuple(src.shape)}, {src.dtype}) last written on {writer[0].name}, "
                f"after {stream.name}'s last wait for it: the copy may read it before it is written "
                "(wait_stream / wait_event before the copy)"
            )
        event = self.sim.to_host(src, dst, non_blocking=True)
        self.copies[event.upto] = (stream, tick())

    def land(self, clock: dict[SimStream, int] | None) -> None:
        """The host synchronized with ``clock`` (None: the whole device): land the copies it orders."""

        def ordered(n: int) -> bool:
            if clock is None or n not in self.copies:
                return True
            stream, t = self.copies[n]
            return clock.get(stream, 0) >= t

        self.sim.land_where(ordered)
