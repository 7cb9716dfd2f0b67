"""Non-blocking device->host copies made by any code, poisoned until synchronized.

On the simulator every tensor is a CPU tensor, so ``x.to("cpu", non_blocking=True)`` cannot be told
from a host->device copy by the tensors' devices (a tensor made on ``cpu:0`` reports ``cpu``). This
module tells them apart by provenance instead: ``DeviceTensors`` (a ``TorchFunctionMode``) knows which
tensors are device tensors and follows them through every torch call made while it is on:

- a tensor made with ``device=`` the simulated device (``torch.device("cpu", 0)``: the index is what
  names the device, a bare ``cpu`` is the host) is a device tensor, and so is everything computed
  from one (views and slices included), except the host results of ``.cpu()``, ``.to("cpu")``,
  ``.numpy()``, ``.tolist()``, ``.item()``; an in-place op (an output that is one of its inputs)
  or ``copy_`` leaves its destination where it was;
- ``.device`` of a device tensor reads ``cpu:0``, so ``torch.zeros(n, device=t.device)`` is one too;
- a non-blocking copy whose source is a device tensor and whose destination is a host tensor
  (``t.to("cpu", non_blocking=True)``, ``host.copy_(t, non_blocking=True)``) goes through the
  simulator's own ``SimDevice.to_host(..., non_blocking=True)``: the destination holds
  ``poison_value`` (NaN, or the dtype's most negative value) until a synchronize lands it
  (``SimDevice.synchronize``, an event from ``event()`` recorded after the copy). A non-blocking
  host->device copy is not poisoned (it is ordered before the device work that reads it).

Only the source's device decides that a copy is a device->host one, as on an NPU or a GPU. Pinned or
pageable is separate there: a pageable destination makes CUDA's ``cudaMemcpyAsync`` (and torch_npu's
``aclrtMemcpyAsync`` path) return only once the copy is done, and ``.to("cpu", non_blocking=True)``
allocates its result pinned, so it is truly asynchronous. The simulator cannot pin memory (a CPU-only
torch) and code that asks for ``non_blocking`` means a pinned buffer, so every host destination of a
non-blocking device->host copy is poisoned here: stricter than a pageable destination on hardware,
never laxer.

Streams order those copies as on an accelerator (``devices.sim.streams``): each write to a device
tensor is stamped with the stream it was issued on, a copy whose source another stream wrote with no
wait between them raises ``StreamOrderError``, and ``land`` (an event's or a stream's synchronize)
lands only the copies ordered before what the host synchronized with. ``record_stream`` on a tensor
is a no-op here (``_stream_recorded`` says why).

Tensors made before a ``DeviceTensors`` is on (a proposer's persistent buffers) are named device
tensors by ``recording`` around their construction, or by ``mark``. ``land_all``, ``land`` and
``event`` reach the simulator of the innermost (else the last) ``DeviceTensors``: what a fake
accelerator runtime's ``synchronize``, streams and events call. This module imports neither ``mtp``
nor ``sim``.

Following every torch call costs a few microseconds each, and most calls of a traced propose call are
the simulator's own (its tiny model's attention, the harness's records of what the model read): code
that stands for the device, or watches it, and makes no host copy of its own. ``kernel`` runs such code
as one kernel of the device (its calls not followed one by one, its tensor results device tensors
written on the current stream when it returns), ``unfollowed`` runs an observer's (its results are the
harness's, no device tensors). Code under test never runs inside either, so nothing it does goes unseen.
"""

from __future__ import annotations

import functools
import weakref
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

from devices.sim.streams import StreamOrder

SIM_DEVICE = torch.device("cpu", 0)  # the simulated accelerator, as code under test names it
HOST_RESULTS = (torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.tolist, torch.Tensor.item)

# id(tensor) -> a weak reference to it: the device tensors. A tensor's entry goes when it is freed,
# before its id can be reused; ``ref() is t`` guards a lookup all the same.
_on_device: dict[int, weakref.ref] = {}
_following: list = []  # every active DeviceTensors, innermost last
_unfollowed = [0]  # how deep the running code is inside ``kernel`` / ``unfollowed`` blocks
_last: list = [None]  # the simulator of the last tracker (late syncs land there)


def is_device_tensor(t) -> bool:
    """Whether ``t`` is a device tensor (by provenance)."""
    ref = _on_device.get(id(t))
    return ref is not None and ref() is t


def tracked_device() -> torch.device | None:
    """The device the innermost tracker follows (a tensor made there is a device tensor), or None where none is on."""
    return _following[-1].device if _following else None


def known_host(t) -> bool:
    """Whether ``t`` is known to be a host tensor: a tracker follows provenance (``tracking``, ``recording``)
    and ``t`` is none of its device tensors. With no tracker on, no tensor is known to be one: every CPU
    tensor may stand for a device's."""
    return bool(_following) and isinstance(t, torch.Tensor) and not is_device_tensor(t)


def _forget(key: int):
    return lambda _: _on_device.pop(key, None)


def _mark(t: torch.Tensor) -> None:
    key = id(t)
    ref = _on_device.get(key)
    if ref is None or ref() is not t:
        _on_device[key] = weakref.ref(t, _forget(key))


def mark(*tensors: torch.Tensor) -> None:
    """Name ``tensors`` device tensors (inputs made before tracking, by code that is not traced)."""
    for t in tensors:
        if isinstance(t, torch.Tensor):
            _mark(t)


def _names_device(target, device: torch.device) -> bool:
    if isinstance(target, torch.Tensor):  # .to(other): other's device
        return is_device_tensor(target)
    return torch.device(target) == device


def _tensors(values, out: list) -> list:
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(x for x in v if isinstance(x, torch.Tensor))
    return out


def _outputs(result) -> list:
    if isinstance(result, torch.Tensor):
        return [result]
    return _tensors(result, []) if isinstance(result, (list, tuple)) else []


def _views_an_input(out: torch.Tensor, inputs: list) -> bool:
    """Whether ``out`` is a view of one of ``inputs`` (a slice writes nothing)."""
    ptr = out.untyped_storage().data_ptr()
    return any(t.untyped_storage().data_ptr() == ptr for t in inputs)


def _to_target(args, kwargs):
    """(target device or tensor or None, non_blocking) of a ``Tensor.to`` call."""
    target, non_blocking = kwargs.get("device", kwargs.get("other")), bool(kwargs.get("non_blocking", False))
    bools = []
    for a in args[1:]:
        if isinstance(a, (str, torch.device, torch.Tensor)) and target is None:
            target = a
        elif isinstance(a, bool):
            bools.append(a)
    if bools:  # to(device, dtype, non_blocking, copy) / to(dtype, non_blocking, copy)
        non_blocking = non_blocking or bools[0]
    return target, non_blocking


class DeviceTensors(TorchFunctionMode):
    """Follows device tensors through torch calls; ``sim`` (a ``SimDevice``, or None: only follow)
    receives the non-blocking device->host copies, which it poisons until synchronized."""

    def __init__(self, sim=None, device: torch.device = SIM_DEVICE):
        super().__init__()
        self.sim, self.device = sim, torch.device(device)
        self.poisoned = 0  # non-blocking device->host copies handed to ``sim``
        self.order = StreamOrder(sim) if sim is not None else None
        self._special = {
            torch.Tensor.device.__get__: self._device_of,
            torch.Tensor.copy_: self._copy,
            torch.Tensor.to: self._to,
            torch.Tensor.cpu: self._cpu,
            torch.Tensor.record_stream: _stream_recorded,
            **{f: _host_result for f in HOST_RESULTS if f is not torch.Tensor.cpu},
        }

    def __enter__(self):
        _following.append(self)
        if self.sim is not None:
            _last[0] = self.sim
        return super().__enter__()

    def __exit__(self, *exc):
        _following.remove(self)
        return super().__exit__(*exc)

    def _wrote(self, t: torch.Tensor) -> None:
        if self.order is not None:
            self.order.wrote(t)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        special = self._special.get(func)
        if special is not None:
            return special(func, args, kwargs)
        result = func(*args, **kwargs)
        if _unfollowed[0]:
            return result
        inputs = _tensors(kwargs.values(), _tensors(args, [])) if kwargs else _tensors(args, [])
        target = kwargs.get("device")
        on = _names_device(target, self.device) if target is not None else any(map(is_device_tensor, inputs))
        for out in _outputs(result):
            in_place = any(out is t for t in inputs)  # an in-place op's destination stays where it was
            if on and not in_place:
                _mark(out)
            if is_device_tensor(out) and (in_place or not _views_an_input(out, inputs)):
                self._wrote(out)
        return result

    def _device_of(self, func, args, kwargs):
        return self.device if is_device_tensor(args[0]) else func(*args, **kwargs)

    def _copy(self, func, args, kwargs):
        dst, src = args[0], args[1]
        non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        if self.sim is not None and non_blocking and is_device_tensor(src) and not is_device_tensor(dst):
            self.poisoned += 1
            self.order.copy_to_host(src, dst)
            return dst
        result = func(*args, **kwargs)
        if is_device_tensor(dst):
            self._wrote(dst)
        return result

    def _to(self, func, args, kwargs):
        src = args[0]
        target, non_blocking = _to_target(args, kwargs)
        src_on = is_device_tensor(src)
        on_device = src_on if target is None else _names_device(target, self.device)
        result = func(*args, **kwargs)
        if on_device == src_on:
            if result is not src and on_device:
                _mark(result)
                self._wrote(result)
            return result
        if result is src:  # the CPU aliases; a copy between host and device makes a new tensor
            result = src.clone()
        if on_device:
            _mark(result)
            self._wrote(result)
        elif self.sim is not None and non_blocking:
            self.poisoned += 1
            self.order.copy_to_host(src, result)
        return result

    def _cpu(self, func, args, kwargs):
        result = func(*args, **kwargs)
        return result.clone() if result is args[0] and is_device_tensor(result) else result


def _host_result(func, args, kwargs):
    return func(*args, **kwargs)


def _stream_recorded(func, args, kwargs) -> None:
    """``t.record_stream(s)``: on an accelerator, the allocator keeps ``t``'s memory until the work ``s``
    has issued so far is done. Here that work ran when it was issued, and the host's memory is freed
    only when nothing refers to it: nothing to keep (the CPU has no ``record_stream`` of its own)."""


@contextmanager
def unfollowed():
    """Inside the block, torch calls are not followed (the special calls above still are: a device
    tensor's ``.device``, its copies): for the harness's own observers of the device, whose results
    are the harness's. Nothing is skipped outside a ``DeviceTensors``."""
    _unfollowed[0] += 1
    try:
        yield
    finally:
        _unfollowed[0] -= 1


def kernel(fn):
    """``fn`` as one kernel of the simulated device: the simulator's own code standing for device work
    (a tiny model's forward). Its torch calls are not followed (``unfollowed``); the tensors it returns
    (a tensor, or a tuple or list of them) are device tensors, written on the current stream when it
    returns, as a kernel's outputs are."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not _following:
            return fn(*args, **kwargs)
        with unfollowed():
            result = fn(*args, **kwargs)
        for out in _outputs(result):
            _mark(out)
            if (tracker := _tracker()) is not None:
                tracker._wrote(out)
        return result

    return run


@contextmanager
def recording(device: torch.device = SIM_DEVICE):
    """Name the tensors made inside the block with ``device=device`` (and those computed from them)
    device tensors: around a proposer's construction, for its persistent buffers. Nothing is poisoned."""
    with DeviceTensors(None, device):
        yield


@contextmanager
def tracking(sim, *inputs: torch.Tensor, device: torch.device = SIM_DEVICE):
    """Inside the block, non-blocking device->host copies made by any code are poisoned on ``sim``
    until synchronized; ``inputs`` are device tensors made before it. Yields the ``DeviceTensors``."""
    mark(*inputs)
    with DeviceTensors(sim, device) as mode:
        yield mode


def _tracker():
    """The innermost active tracker with a simulator (one that poisons and orders copies), or None."""
    return next((mode for mode in reversed(_following) if mode.sim is not None), None)


def _sim():
    tracker = _tracker()
    return tracker.sim if tracker is not None else _last[0]


def land_all() -> None:
    """Land every pending copy (a device-wide synchronize); nothing without a simulator."""
    sim = _sim()
    if sim is not None:
        sim.synchronize()


def land(clock) -> None:
    """The host synchronized with a stream's ``clock`` (an event's, or a stream's own): land the copies
    ordered before it (``devices.sim.streams``); past the tracked call, every pending copy."""
    if (tracker := _tracker()) is not None:
        tracker.order.land(clock)
    else:
        land_all()


def event():
    """An event recorded now: its ``synchronize`` lands the copies issued before it (None without a simulator)."""
    sim = _sim()
    return None if sim is None else sim.event()
