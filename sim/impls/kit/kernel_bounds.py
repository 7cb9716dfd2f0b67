"""Triton kernels run in the interpreter with guard zones around every tensor argument.

On an NPU, a masked-in load outside a tensor reads whatever the allocator mapped there,
or faults: vllm-ascend's rejection-sampling kernels loaded ``cu_num_draft_tokens[-1]``
for request 0 (``tl.where(offset == 0, 0, tl.load(ptr + offset - 1, mask))`` evaluates
both operands) and met "MTE DDR out-of-range" errors only sometimes, depending on the
mapping before the tensor (vllm-ascend #14902, #16215). Triton's interpreter reads host
memory, where such a load returns a neighbour's bytes silently. Here each launch's
tensor arguments are copied into buffers with ``GUARD`` bytes on either side (one buffer
per storage, so arguments that alias still alias), every masked-in load, store and atomic
is checked against the argument tensors' own extents, and one outside them fails with
``KernelOutOfBounds``, naming the kernel, the program, the argument it is nearest and the
element offset. The copies are written back when the launch ends, as the interpreter
writes back its own host copies.

Memory a kernel reaches through a table of addresses rather than an argument (vLLM MRV2's
``block_table_ptrs``, the data pointers of each KV-cache group's block table) is named with
``reachable``; it is checked against its own extent, not copied.

A known defect's access is tolerated only as ``tolerating(Access(...))`` names it
exactly (kernel, argument, offset), and each tolerated access is recorded, so the
defect's pin can show it still happens. Tensor-descriptor and block-pointer loads are
not checked (none of the kernels the gate launches uses them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import types
import weakref
from dataclasses import dataclass, field

import numpy as np
import torch

from devices.sim import graph as sim_graph

GUARD = 4096  # bytes each side of a storage; an access this far out is still named by its argument
POISON = 0xA5  # what a guard zone holds: an out-of-bounds read returns this, never a neighbour's value


class KernelOutOfBounds(RuntimeError):
    """A masked-in memory access of a Triton kernel outside every tensor argument."""


@dataclass(frozen=True)
class Access:
    """One element access outside an argument: ``offset`` in elements from the argument's first."""

    kernel: str
    arg: str
    offset: int
    op: str = "load"

    def __str__(self) -> str:
        return f"{self.kernel}: {self.op} of {self.arg}[{self.offset}]"


@dataclass
class _Extent:
    name: str
    start: int  # address of element 0
    end: int  # one past the last byte the view reaches
    itemsize: int
    numel: int


@dataclass
class _Launch:
    kernel: str
    extents: list[_Extent]
    copies: list[tuple[torch.Tensor, torch.Tensor]]  # (the interpreter's host tensor, its guarded copy)


@dataclass
class Watched:
    """What the launches inside a ``tolerating`` block did: the tolerated accesses that happened and
    the kernels launched."""

    seen: set = field(default_factory=set)
    launched: set = field(default_factory=set)


_state = {"launch": None, "tolerated": frozenset(), "watched": None}
_reachable: list[tuple[str, weakref.ref]] = []  # tensors kernels reach through a table of addresses


def reachable(name: str, tensor: torch.Tensor) -> None:
    """``tensor`` may be reached by a kernel through a table of addresses (while it lives): its extent
    counts as inside, under ``name``."""
    _reachable[:] = [(n, ref) for n, ref in _reachable if ref() is not None]
    _reachable.append((name, weakref.ref(tensor)))


def _extent(name: str, t: torch.Tensor) -> _Extent:
    reach = sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 0) + 1 if t.numel() else 0
    return _Extent(name, t.data_ptr(), t.data_ptr() + reach * t.element_size(), t.element_size(), t.numel())


def _guarded(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list]:
    """Each tensor as a view into a copy of its storage with ``GUARD`` poisoned bytes either side."""
    buffers: dict[int, torch.Tensor] = {}
    out, copies = {}, []
    for name, t in tensors.items():
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in buffers:
            raw = torch.empty(0, dtype=torch.uint8).set_(storage)
            buf = torch.full((GUARD + raw.numel() + GUARD,), POISON, dtype=torch.uint8)
            buf[GUARD : GUARD + raw.numel()] = raw
            buffers[key] = buf
        base = buffers[key].untyped_storage()
        view = torch.empty(0, dtype=t.dtype).set_(
            base, GUARD // t.element_size() + t.storage_offset(), t.size(), t.stride()
        )
        out[name] = view
        copies.append((t, view))
    return out, copies


@functools.cache
def _parameters(fn) -> tuple[str, ...]:
    return tuple(inspect.signature(fn).parameters)


def _named_tensors(fn, args, kwargs) -> dict[str, torch.Tensor]:
    named = {**dict(zip(_parameters(fn), args)), **kwargs}
    return {name: v for name, v in named.items() if isinstance(v, torch.Tensor)}


def _check(op: str, ptrs, mask, itemsize: int) -> None:
    launch = _state["launch"]
    if launch is None:
        return
    addrs = np.broadcast_to(ptrs.data, np.shape(mask.data))[mask.data] if mask is not None else ptrs.data.ravel()
    if addrs.size == 0:
        return
    addrs = addrs.astype(np.int64)
    lo, hi = int(addrs.min()), int(addrs.max()) + itemsize
    if any(e.start <= lo and hi <= e.end for e in launch.extents):  # the common case: all in one argument
        return
    inside = np.zeros(addrs.shape, dtype=bool)
    for e in launch.extents:
        inside |= (addrs >= e.start) & (addrs + itemsize <= e.end)
    for addr in np.unique(addrs[~inside]):
        access = _attribute(launch, op, int(addr))
        if access in _state["tolerated"]:
            _state["watched"].seen.add(access)
            continue
        e = next(x for x in launch.extents if x.name == access.arg)
        from triton.runtime.interpreter import interpreter_builder

        raise KernelOutOfBounds(
            f"{access} (program {tuple(interpreter_builder.grid_idx)}): outside its {e.numel} elements; "
            "on an NPU this reads or writes whatever lies there"
        )


def _attribute(launch: _Launch, op: str, addr: int) -> Access:
    """The access as an offset into the argument whose extent is nearest ``addr``."""

    def distance(e: _Extent) -> int:
        return e.start - addr if addr < e.start else max(0, addr - e.end + 1)

    e = min(launch.extents, key=distance)
    return Access(launch.kernel, e.name, (addr - e.start) // e.itemsize, op)


def _np_itemsize(handle) -> int:
    return _itemsize(handle.get_element_ty())


@functools.cache  # asked at every load and store; a Triton scalar type hashes by its name
def _itemsize(element_ty) -> int:
    from triton.runtime.interpreter import _get_np_dtype

    return np.dtype(_get_np_dtype(element_ty)).itemsize


@contextlib.contextmanager
def tolerating(*accesses: Access):
    """Known defects' accesses let through inside the block; yields what the block's launches did
    (``Watched``)."""
    watched = Watched()
    before = dict(_state)
    _state["tolerated"] = frozenset(accesses) | before["tolerated"]
    _state["watched"] = watched
    try:
        yield watched
    finally:
        _state["tolerated"], _state["watched"] = before["tolerated"], before["watched"]
        if before["watched"] is not None:
            before["watched"].seen |= watched.seen
            before["watched"].launched |= watched.launched


def install() -> bool:
    """Guard the interpreter's launches and spare it its dead work (once per process); False where
    Triton is not interpreted here."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter

    executor = interpreter.GridExecutor
    if getattr(executor, "_guarded", False):
        return True
    call, init_args, restore_args = executor.__call__, executor._init_args_hst, executor._restore_args_dev

    def run(self, *args, **kwargs):
        try:
            call(self, *args, **kwargs)
        except interpreter.InterpreterError as exc:  # the interpreter wraps what a kernel raised
            if isinstance(exc.__cause__, KernelOutOfBounds):
                raise exc.__cause__ from None
            raise

    def launch(self, *args, **kwargs):
        sim_graph.launch(lambda: run(self, *args, **kwargs))  # inside a capture, replayed as one launch

    def init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        names = _parameters(self.fn)
        tensors = _named_tensors(self.fn, args_hst, kwargs_hst)
        guarded, copies = _guarded(tensors)
        args_hst = [guarded.get(names[i], a) if i < len(names) else a for i, a in enumerate(args_hst)]
        kwargs_hst = {k: guarded.get(k, v) for k, v in kwargs_hst.items()}
        extents = [_extent(n, t) for n, t in guarded.items()]
        extents += [_extent(n, t) for n, ref in _reachable if (t := ref()) is not None]
        _state["launch"] = _Launch(self.fn.__name__, extents, copies)
        if _state["watched"] is not None:
            _state["watched"].launched.add(self.fn.__name__)
        return args_hst, kwargs_hst

    def restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        launch, _state["launch"] = _state["launch"], None
        if launch is not None:
            for host, copy in launch.copies:
                host.copy_(copy)
            originals = {id(c): h for h, c in launch.copies}
            args_hst = [originals.get(id(a), a) for a in args_hst]
            kwargs_hst = {k: originals.get(id(v), v) for k, v in kwargs_hst.items()}
        restore_args(self, args_dev, args_hst, kwargs, kwargs_hst)

    builder = interpreter.interpreter_builder
    load, store, rmw, cas = (
        builder.create_masked_load,
        builder.create_masked_store,
        builder.create_atomic_rmw,
        builder.create_atomic_cas,
    )

    def create_masked_load(ptrs, mask, other, *rest):
        _check("load", ptrs, mask, _np_itemsize(ptrs))
        return load(ptrs, mask, other, *rest)

    def create_masked_store(ptrs, value, mask, *rest):
        _check("store", ptrs, mask, _np_itemsize(ptrs))
        return store(ptrs, value, mask, *rest)

    def create_atomic_rmw(op, ptr, val, mask, *rest):
        _check("atomic", ptr, mask, _np_itemsize(ptr))
        return rmw(op, ptr, val, mask, *rest)

    def create_atomic_cas(ptr, cmp, val, *rest):
        _check("atomic", ptr, None, _np_itemsize(ptr))
        return cas(ptr, cmp, val, *rest)

    executor.__call__, executor._init_args_hst, executor._restore_args_dev = launch, init_args_hst, restore_args_dev
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = create_atomic_rmw, create_atomic_cas
    _dead_work_skipped(interpreter)
    executor._guarded = True
    return True


def _dead_work_skipped(interpreter) -> None:
    """Work the interpreter does whose result nothing reads, not done.

    Its overflow sanitizer casts the operands of every integer add, sub and mul to int64, recomputes
    the operation, compares it with the type's bounds and hands the result to ``device_assert``, which
    drops it unless the options say ``debug`` (they never do here: ``InterpreterOptions()``): about a
    third of an interpreted kernel's time, with no check made. With ``debug`` on, it stays on.
    ``_get_np_dtype`` builds a table of 17 dtypes at each of its calls; its answers are kept.
    ``_patch_lang`` points ``triton.language``'s builtins at the interpreter at every launch and every
    call of a jit function inside one (walking the modules' members each time: about 1 ms), and puts
    them back when the launch ends; the patch is the same for every kernel (the two modules a kernel
    can see, the one builder), and nothing here calls a builtin outside a kernel, so it is made once
    and kept."""
    builder = interpreter.interpreter_builder
    if not builder.options.debug:
        builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    table, build = {}, interpreter._get_np_dtype

    def get_np_dtype(tt_dtype):
        try:
            return table[tt_dtype]
        except KeyError:
            table[tt_dtype] = found = build(tt_dtype)
            return found
        except TypeError:  # an unhashable pointer type: one line of the original
            return build(tt_dtype)

    interpreter._get_np_dtype = get_np_dtype

    patch, kept = interpreter._patch_lang, []

    def patch_lang(fn):
        if not kept:
            import triton.language as tl

            kept.append(patch(types.SimpleNamespace(__globals__={"tl": tl, "core": tl.core})))
        return _KEPT

    interpreter._patch_lang = patch_lang


_KEPT = types.SimpleNamespace(restore=lambda: None)  # a launch's patch scope: the language stays patched
