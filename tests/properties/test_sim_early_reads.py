"""The simulator's early-read check for copies made by any code (``devices.sim.early_reads``).

A non-blocking device->host copy made by plain torch (not through the ``Device`` API) must hold
poison until synchronized, as ``SimDevice.to_host`` does; a host->device one must not; views of a
device buffer stay device tensors. Each test reads the real values back where the check must let
them through, so a tracker that poisons everything fails here too.
"""

from __future__ import annotations

import pytest
import torch

from devices.sim import SimDevice, early_reads, streams
from devices.sim.device import poison_value

DEV = early_reads.SIM_DEVICE


@pytest.fixture
def sim():
    return SimDevice()


def _buffer():
    with early_reads.recording():
        return torch.arange(6, dtype=torch.int32, device=DEV) + 1


def test_a_buffer_made_on_the_device_is_a_device_tensor_and_a_bare_cpu_one_is_not():
    with early_reads.recording():
        dev = torch.zeros(3, device=DEV)
        host = torch.zeros(3, device="cpu")
        like = torch.zeros(3, device=dev.device)  # .device of a device tensor names the device
        pinned_style = torch.zeros(3)
    assert early_reads.is_device_tensor(dev) and early_reads.is_device_tensor(like)
    assert not early_reads.is_device_tensor(host) and not early_reads.is_device_tensor(pinned_style)


@pytest.mark.parametrize("form", ["to", "to-positional", "copy_", "copy_-into-a-slice"])
def test_an_early_read_of_a_non_blocking_device_to_host_copy_reads_poison(sim, form):
    buf = _buffer()
    want = buf.tolist()
    with early_reads.tracking(sim) as mode:
        if form == "to":
            host = buf.to("cpu", non_blocking=True)
        elif form == "to-positional":
            host = buf.to(torch.device("cpu"), torch.int64, True)
        elif form == "copy_":
            host = torch.zeros(6, dtype=torch.int32)
            host.copy_(buf, non_blocking=True)
        else:
            whole = torch.zeros(8, dtype=torch.int32)
            host = whole[:6]
            host.copy_(buf, non_blocking=True)
        early = host.tolist()
        sim.synchronize()
        late = host.tolist()
    assert mode.poisoned == 1
    assert early == [poison_value(host.dtype)] * 6, f"read before the sync: {early}"
    assert late == want


def test_an_event_recorded_after_the_copy_lands_it_and_one_before_does_not(sim):
    buf = _buffer()
    with early_reads.tracking(sim):
        before = early_reads.event()
        host = torch.zeros(6, dtype=torch.int32)
        host.copy_(buf, non_blocking=True)
        after = early_reads.event()
        before.synchronize()
        assert host.tolist() == [torch.iinfo(torch.int32).min] * 6
        after.synchronize()
        assert host.tolist() == buf.tolist()


def test_a_float_copy_reads_nan_until_the_device_synchronizes(sim):
    with early_reads.recording():
        buf = torch.linspace(0, 1, 4, device=DEV)
    with early_reads.tracking(sim):
        host = (buf * 2).to("cpu", non_blocking=True)  # computed from a device tensor: on the device
        assert torch.isnan(host).all()
        early_reads.land_all()
    torch.testing.assert_close(host, buf * 2)


def test_a_non_blocking_host_to_device_copy_is_not_poisoned(sim):
    buf = _buffer()
    host = torch.tensor([7, 8, 9, 10, 11, 12], dtype=torch.int32)
    with early_reads.tracking(sim) as mode:
        dev = host.to(DEV, non_blocking=True)
        buf.copy_(host, non_blocking=True)
        assert dev.tolist() == host.tolist() and buf.tolist() == host.tolist()
        assert early_reads.is_device_tensor(dev)
    assert mode.poisoned == 0


def test_a_blocking_device_to_host_copy_is_immediate(sim):
    buf = _buffer()
    with early_reads.tracking(sim) as mode:
        assert buf.to("cpu").tolist() == buf.tolist()
        assert buf.cpu().tolist() == buf.tolist()
    assert mode.poisoned == 0


def test_views_and_slices_of_a_device_buffer_stay_device_tensors(sim):
    buf = _buffer()
    with early_reads.tracking(sim):
        views = [buf[1:4], buf.view(2, 3), buf[buf > 2], buf.narrow(0, 0, 2), torch.cat([buf[:1], buf[2:]])]
        hosts = [v.to("cpu", non_blocking=True) for v in views]
        assert all(early_reads.is_device_tensor(v) for v in views)
        assert all((h == poison_value(h.dtype)).all() for h in hosts)
        sim.synchronize()
        assert [h.tolist() for h in hosts] == [v.tolist() for v in views]


def test_host_results_and_in_place_destinations_stay_on_the_host(sim):
    buf = _buffer()
    host = torch.zeros(6, dtype=torch.int32)
    with early_reads.tracking(sim) as mode:
        back = buf.cpu()
        host.add_(buf)  # the destination is where it was
        copied = host.to("cpu", non_blocking=True)  # host to host: nothing in flight
    assert not early_reads.is_device_tensor(back) and not early_reads.is_device_tensor(host)
    assert copied.tolist() == buf.tolist() and mode.poisoned == 0


def test_inputs_named_device_tensors_are_followed(sim):
    made_before = torch.arange(3)
    with early_reads.tracking(sim, made_before):
        host = (made_before + 1).to("cpu", non_blocking=True)
        assert host.tolist() == [torch.iinfo(torch.int64).min] * 3
        sim.synchronize()
        assert host.tolist() == [1, 2, 3]


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.uint8, torch.bool]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_has_a_poison_an_early_read_cannot_mistake(sim, dtype):
    """A copy of any dtype: read early, every element differs from what lands (a bool holds the
    negation of its value, an unsigned int its largest value, 0 being common); synchronized, the
    copy's values. For a bool mask, True and False both."""
    with early_reads.recording():
        values = torch.tensor([0, 1, 2, 1, 0, 3], device=DEV)
        buf = (values % 2).to(torch.bool) if dtype == torch.bool else values.to(dtype)
    want = buf.tolist()
    with early_reads.tracking(sim):
        host = buf.to("cpu", non_blocking=True)
        early = host.clone()
        sim.synchronize()
    assert host.tolist() == want
    differs = early != buf if dtype == torch.bool or not dtype.is_floating_point else early.isnan()
    assert differs.all(), f"{dtype}: read before the sync {early.tolist()}, lands {want}"
    if dtype != torch.bool:
        assert (early.isnan() if dtype.is_floating_point else early == poison_value(dtype)).all()


@early_reads.kernel
def _tiny_kernel(x: torch.Tensor, into_host: torch.Tensor):
    """The simulator's own device work: a result computed from ``x``, one from host values only, and a
    non-blocking copy of its own into ``into_host`` (which no kernel makes; here to show it is seen)."""
    into_host.copy_(x, non_blocking=True)
    return x * 2, torch.ones(3, dtype=x.dtype)


def test_a_kernels_results_are_device_tensors_written_on_the_current_stream(sim):
    """What a kernel returns is a device tensor, even one made from host values only: a non-blocking copy
    of it to the host reads poison until synchronized, and one on a side stream that did not wait for the
    kernel's stream is named. Its temporaries are not followed; a device tensor's copy inside it still is."""
    buf = _buffer()
    seen = torch.zeros(6, dtype=torch.int32)
    with early_reads.tracking(sim) as mode:
        doubled, ones = _tiny_kernel(buf, seen)
        assert early_reads.is_device_tensor(doubled) and early_reads.is_device_tensor(ones)
        assert mode.poisoned == 1 and seen.tolist() == [poison_value(torch.int32)] * 6
        host = doubled.to("cpu", non_blocking=True)
        assert host.tolist() == [poison_value(torch.int32)] * 6
        sim.synchronize()
        assert host.tolist() == [2 * v for v in buf.tolist()] and seen.tolist() == buf.tolist()
        side = streams.SimStream("the copy stream")
        with streams.using(side), pytest.raises(streams.StreamOrderError, match="the copy stream"):
            ones.to("cpu", non_blocking=True)


def test_an_observers_results_are_the_harnesss_and_a_device_tensor_keeps_its_device(sim):
    buf = _buffer()
    with early_reads.tracking(sim) as mode:
        with early_reads.unfollowed():
            snapshot = buf.clone()
            assert buf.device == DEV  # the special calls are still served
        copied = snapshot.to("cpu", non_blocking=True)  # a host tensor's copy: nothing in flight
        assert not early_reads.is_device_tensor(snapshot) and copied.tolist() == buf.tolist()
        assert early_reads.is_device_tensor(buf * 1)  # followed again after the block
    assert mode.poisoned == 0


def test_a_kernel_outside_any_tracking_is_a_plain_call():
    host = torch.zeros(6, dtype=torch.int32)
    doubled, _ = _tiny_kernel(torch.arange(6, dtype=torch.int32), host)
    assert not early_reads.is_device_tensor(doubled) and host.tolist() == list(range(6))
