"""The guard around every Triton launch in the interpreter (``sim.impls.kit.kernel_bounds``), on small kernels.

A masked-in access outside its argument fails, naming the kernel, the argument and the offset; a
masked-out one does not; what a kernel writes reaches the caller's tensors, views and aliases
included; a tolerated access is let through only as named, and recorded. Run where the adapters'
kernels run (Triton interpreted: ``tox -e vllm_ascend``).
"""

from __future__ import annotations

import pytest
import torch

from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend.importing import prepare

prepare()  # the adapter's environment: the interpreter, the guard installed
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def predecessor(out_ptr, cu_ptr, n, GUARDED: tl.constexpr, BLOCK: tl.constexpr):
    offset = tl.arange(0, BLOCK)
    mask = offset < n
    if GUARDED:
        start = tl.load(cu_ptr + offset - 1, mask & (offset > 0), other=0)
    else:
        start = tl.where(offset == 0, 0, tl.load(cu_ptr + offset - 1, mask))
    tl.store(out_ptr + offset, start, mask)


@triton.jit
def shift_store(out_ptr, src_ptr, n, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    offset = tl.arange(0, BLOCK)
    mask = offset < n
    tl.store(out_ptr + offset + SHIFT, tl.load(src_ptr + offset, mask), mask)


CU = [2, 3, 5]


def test_the_guard_is_installed_where_the_adapters_run():
    assert kernel_bounds.install()


def test_a_masked_in_read_before_an_argument_is_named():
    out = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(
        kernel_bounds.KernelOutOfBounds,
        match=r"^predecessor: load of cu_ptr\[-1\] \(program \(0, 0, 0\)\): outside its 3 elements",
    ):
        predecessor[(1,)](out, torch.tensor(CU, dtype=torch.int32), 3, GUARDED=False, BLOCK=4)


def test_the_same_read_masked_out_passes_and_its_values_land():
    out = torch.zeros(3, dtype=torch.int32)
    predecessor[(1,)](out, torch.tensor(CU, dtype=torch.int32), 3, GUARDED=True, BLOCK=4)
    assert out.tolist() == [0, 2, 3]


def test_a_store_past_the_end_is_named_and_nothing_lands_in_a_neighbour():
    backing = torch.zeros(8, dtype=torch.int64)
    out = backing[2:5]  # a view: its storage holds elements outside it
    with pytest.raises(kernel_bounds.KernelOutOfBounds, match=r"store of out_ptr\[3\] .*outside its 3 elements"):
        shift_store[(1,)](out, torch.arange(3), 3, SHIFT=1, BLOCK=4)
    assert backing.tolist() == [0] * 8


def test_views_and_aliases_are_written_back_as_the_kernel_wrote_them():
    backing = torch.arange(8, dtype=torch.int64)
    shift_store[(1,)](backing[4:7], backing[0:3], 3, SHIFT=0, BLOCK=4)  # two views of one storage
    assert backing.tolist() == [0, 1, 2, 3, 0, 1, 2, 7]


def test_a_tolerated_access_passes_only_as_named_and_is_recorded():
    out, cu = torch.zeros(3, dtype=torch.int32), torch.tensor(CU, dtype=torch.int32)
    with kernel_bounds.tolerating(kernel_bounds.Access("predecessor", "cu_ptr", -1)) as watched:
        predecessor[(1,)](out, cu, 3, GUARDED=False, BLOCK=4)
    assert out.tolist() == [0, 2, 3]
    assert watched.seen == {kernel_bounds.Access("predecessor", "cu_ptr", -1)}
    assert watched.launched == {"predecessor"}
    with kernel_bounds.tolerating(kernel_bounds.Access("predecessor", "cu_ptr", -2)):
        with pytest.raises(kernel_bounds.KernelOutOfBounds, match=r"cu_ptr\[-1\]"):
            predecessor[(1,)](out, cu, 3, GUARDED=False, BLOCK=4)


@triton.jit
def through_table(out_ptr, table_ptr, n, BLOCK: tl.constexpr):
    """Loads from the tensor whose address ``table_ptr[0]`` holds (as MRV2 reaches its block tables)."""
    src = tl.load(table_ptr).to(tl.pointer_type(tl.int32))
    offset = tl.arange(0, BLOCK)
    tl.store(out_ptr + offset, tl.load(src + offset, offset < n), offset < n)


def test_memory_reached_through_a_table_of_addresses_is_inside_once_named():
    src, out = torch.tensor([7, 8, 9], dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    table = torch.tensor([src.data_ptr()], dtype=torch.int64)
    with pytest.raises(kernel_bounds.KernelOutOfBounds, match=r"through_table: load of "):
        through_table[(1,)](out, table, 3, BLOCK=4)
    kernel_bounds.reachable("the source", src)
    through_table[(1,)](out, table, 3, BLOCK=4)
    assert out.tolist() == [7, 8, 9]


@triton.jit
def mixed_arithmetic(out_ptr, a_ptr, b_ptr, h_ptr, flags_ptr, n, BLOCK: tl.constexpr):
    offset = tl.arange(0, BLOCK)
    mask = offset < n
    a = tl.load(a_ptr + offset, mask)  # int32
    b = tl.load(b_ptr + offset, mask)  # int64
    h = tl.load(h_ptr + offset, mask)  # float16
    flag = tl.load(flags_ptr + offset, mask) != 0
    wrapped = a * 3 + 7  # int32, wraps past its bounds as on the device
    total = tl.where(flag, wrapped.to(tl.int64) + b, b - a) + h.to(tl.int64)
    tl.store(out_ptr + offset, total, mask)


def test_the_interpreters_arithmetic_is_the_devices_without_its_dead_work():
    """The interpreter as ``install`` leaves it (no overflow sanitizer while its asserts are off, the
    dtype table kept) computes what torch computes, int32 wrapping included."""
    assert kernel_bounds.install()
    a = torch.tensor([1, -5, 2**31 - 1, 700_000_000, 0], dtype=torch.int32)
    b = torch.tensor([10, 2**40, -3, 4, 5], dtype=torch.int64)
    h = torch.tensor([0.0, 1.0, 2.0, -3.0, 8.0], dtype=torch.float16)
    flags = torch.tensor([1, 0, 1, 1, 0], dtype=torch.int8)
    out = torch.zeros(5, dtype=torch.int64)
    mixed_arithmetic[(1,)](out, a, b, h, flags, 5, BLOCK=8)
    wrapped = (a * 3 + 7).to(torch.int64)  # torch wraps int32 as the device does
    want = torch.where(flags != 0, wrapped + b, b - a.to(torch.int64)) + h.to(torch.int64)
    assert out.tolist() == want.tolist()


def test_a_launch_inside_a_graph_capture_runs_again_at_each_replay():
    """A Triton launch captured in a graph (vllm-ascend's MRV2 decode graph holds its slot-mapping, sampling
    and input-update kernels) is one launch of the graph, replayed on the captured tensors; the interpreter's
    own host copies are not recorded as the program's ops."""
    from devices.sim import graph as sim_graph

    src, out = torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    with sim_graph.capture(4) as graph:
        shift_store[(1,)](out, src, 4, SHIFT=0, BLOCK=4)
        doubled = out * 2
    src.copy_(torch.tensor([1, 2, 3, 4], dtype=torch.int32))
    graph.replay(4)
    assert out.tolist() == [1, 2, 3, 4] and doubled.tolist() == [2, 4, 6, 8]
