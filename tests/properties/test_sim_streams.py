"""Streams and events on the simulator (``devices.sim.streams``), as an NPU orders them.

A copy to the host issued on a side stream reads its source only where that stream waited for the
source's writer; the host sees it land only by synchronizing with the copy's stream past the copy.
Each test runs the correct order and reads the real values back, and the broken order where it must
fail: a tracker that refused every side-stream copy, or landed none, fails here too.
"""

from __future__ import annotations

import pytest
import torch

from devices.sim import SimDevice, early_reads, streams
from devices.sim.device import poison_value
from devices.sim.streams import SimStream, SimStreamEvent, StreamOrderError

DEV = early_reads.SIM_DEVICE
POISON = poison_value(torch.int64)


@pytest.fixture
def sim():
    return SimDevice()


def _counts():
    """Device counts written on the default stream, and a host buffer for them."""
    counts = torch.arange(4, dtype=torch.int64, device=DEV) + 1  # a write on the current (default) stream
    return counts, torch.zeros(4, dtype=torch.int64)


def _land(event: SimStreamEvent) -> None:
    early_reads.land(event.clock)


@pytest.mark.parametrize("order", ["wait_stream", "wait_event"])
def test_a_side_stream_copy_after_a_wait_lands_at_its_event(sim, order):
    side, done = SimStream("the copy stream"), SimStreamEvent()
    with early_reads.tracking(sim):
        counts, host = _counts()
        default = streams.current()
        if order == "wait_event":
            written = SimStreamEvent()
            written.record()
        with streams.using(side):
            side.wait_stream(default) if order == "wait_stream" else written.wait()
            host.copy_(counts, non_blocking=True)
            done.record()
        early = host.tolist()
        _land(done)
        assert host.tolist() == [1, 2, 3, 4]
    assert early == [POISON] * 4, "read before the event's synchronize"


@pytest.mark.parametrize(
    "order", ["no wait", "waits on itself", "waited before the write", "event recorded before the write"]
)
def test_a_side_stream_copy_of_an_unwaited_write_is_named(sim, order):
    """vllm-ascend#9456's form among them: the copy stream ``wait_stream``s the stream current inside
    its own ``with torch.npu.stream(...)``, i.e. itself."""
    side = SimStream("the copy stream")
    with early_reads.tracking(sim):
        host = torch.zeros(4, dtype=torch.int64)
        early = SimStreamEvent()
        if order == "waited before the write":
            side.wait_stream(streams.current())
        if order == "event recorded before the write":
            early.record()
            side.wait_clock(early.clock)
        counts, _ = _counts()
        with streams.using(side):
            if order == "waits on itself":
                side.wait_stream(streams.current())
            with pytest.raises(
                StreamOrderError, match=r"on the copy stream reads .* last written on the default stream"
            ):
                host.copy_(counts, non_blocking=True)


@pytest.mark.parametrize("default_waits", [False, True], ids=["no-wait", "waits-for-the-copy-stream"])
def test_an_event_on_the_default_stream_lands_the_copy_only_after_a_wait(sim, default_waits):
    """An event recorded on the default stream lands the side stream's copy only if the default stream
    waited for the copy stream first; a device-wide synchronize lands it whatever the order."""
    side, on_default = SimStream("the copy stream"), SimStreamEvent()
    with early_reads.tracking(sim):
        counts, host = _counts()
        side.wait_stream(streams.current())
        with streams.using(side):
            host.copy_(counts, non_blocking=True)
        if default_waits:
            streams.current().wait_stream(side)
        on_default.record()
        _land(on_default)
        assert host.tolist() == ([1, 2, 3, 4] if default_waits else [POISON] * 4)
        early_reads.land_all()
        assert host.tolist() == [1, 2, 3, 4]


def test_reading_a_slice_on_the_side_stream_is_no_write(sim):
    """A view taken on the copy stream writes nothing: the copy still reads the default stream's write,
    ordered by the wait, and lands."""
    side, done = SimStream("the copy stream"), SimStreamEvent()
    with early_reads.tracking(sim):
        counts, host = _counts()
        side.wait_stream(streams.current())
        with streams.using(side):
            head = counts[:2]
            host[:2].copy_(head, non_blocking=True)
            done.record()
        _land(done)
        assert host[:2].tolist() == [1, 2]


def test_a_write_on_the_side_stream_is_the_side_streams(sim):
    """What the copy stream computed itself needs no wait; the default stream then reading it back to the
    host needs one."""
    side = SimStream("the copy stream")
    with early_reads.tracking(sim):
        counts, host = _counts()
        side.wait_stream(streams.current())
        with streams.using(side):
            doubled = counts * 2
            host.copy_(doubled, non_blocking=True)
        with pytest.raises(StreamOrderError, match=r"on the default stream reads .* last written on the copy stream"):
            torch.zeros(4, dtype=torch.int64).copy_(doubled, non_blocking=True)


def test_streams_are_torch_streams_told_apart_by_identity(sim):
    """torch's own stream arguments take a simulator stream (main's rejection sampler hands
    ``q.record_stream(torch.npu.current_stream())``), and two streams are two clocks: were they equal as
    ``torch.Stream``s are (the host's one stream id), one stream's waits would order the other's work."""
    side, other = SimStream("the copy stream"), SimStream("another stream")
    assert isinstance(side, torch.Stream)
    assert side != other and len({side, other, side}) == 2
    other.wait_stream(streams.current())
    assert not side.orders(other, streams.tick() - 1)
    with early_reads.tracking(sim):
        counts, _ = _counts()
        assert counts.record_stream(side) is None
    with pytest.raises(NotImplementedError, match="record_stream"):  # the host's tensors have none
        torch.zeros(1).record_stream(side)
