"""What every device backend must do; run with ``pytest --device NAME``.

The simulator passes these by construction of its strictness; an accelerator
passes them by being real hardware. A backend that fails one would let graph
bugs through.
"""

from __future__ import annotations

import socket

import pytest
import torch

from devices.base import GraphError
from devices.sync_watch import HostSyncError
from sim.ranks.pool import rank_context

pytestmark = pytest.mark.order(1)


def _work(x, w):
    return torch.relu(x @ w).sum(dim=0) * 2


def _captured(device, x, w):
    """A graph of ``_work`` at size 4 with ``x`` declared as its input, and its output."""
    _work(x, w)  # warm-up, as accelerators require
    with device.capture(4, device.graph_pool(), {"x": x}) as graph:
        out = _work(x, w)
    return graph, out


@pytest.fixture
def buffers(device):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=gen).to(device.torch_device), torch.randn(8, 8, generator=gen).to(
        device.torch_device
    )


@pytest.mark.needs("supports_graphs")
def test_a_conversion_captured_in_inference_mode_is_replayed(device):
    """Inference mode (where vLLM runners capture) leaves ``aten.to`` undecomposed, an op that may
    alias its input: one that made a new tensor must be replayed, not taken for a view."""
    x = torch.zeros(4, dtype=torch.int32, device=device.torch_device)
    with torch.inference_mode(), device.capture(4, device.graph_pool(), {"x": x}) as graph:
        out = x.to(torch.int64) + 0
    x.fill_(3)
    with torch.inference_mode():
        graph.replay(4, {"x": x})
    device.synchronize()
    assert out.tolist() == [3] * 4


@pytest.mark.needs("supports_graphs")
def test_replay_equals_eager_on_new_inputs(device, buffers):
    x, w = buffers
    graph, out = _captured(device, x, w)
    x.copy_(torch.randn_like(x))
    graph.replay(4, {"x": x})
    device.synchronize()
    torch.testing.assert_close(out, _work(x, w))


@pytest.mark.needs("supports_graphs")
def test_rebound_input_is_stale_and_reported(device, buffers):
    x, w = buffers
    graph, out = _captured(device, x, w)
    before = _work(x, w).clone()
    fresh = x + 1.0  # a new tensor under the old name: the graph cannot see it
    graph.replay(4)
    device.synchronize()
    torch.testing.assert_close(out, before)
    assert not torch.allclose(out, _work(fresh, w))
    with pytest.raises(GraphError, match="moved"):
        graph.replay(4, {"x": fresh})


@pytest.mark.needs("supports_graphs")
def test_replay_only_at_captured_size(device, buffers):
    graph, _ = _captured(device, *buffers)
    with pytest.raises(GraphError, match="captured at size 4"):
        graph.replay(8)


@pytest.mark.needs("supports_graphs")
@pytest.mark.parametrize("sync", ["item", "tolist", "bool", "nonzero", "mask"])
def test_host_sync_inside_capture_is_refused(device, buffers, sync):
    x, _ = buffers
    do = {
        "item": lambda: x.sum().item(),
        "tolist": lambda: x.tolist(),
        "bool": lambda: bool(x.sum() > 0),
        "nonzero": lambda: torch.nonzero(x),
        "mask": lambda: x[x > 0],
    }[sync]
    with pytest.raises((HostSyncError, RuntimeError)):
        with device.capture(1, device.graph_pool()):
            do()


@pytest.mark.needs("supports_graphs", "supports_param_update")
def test_host_params_frozen_until_updated(device, buffers):
    x, _ = buffers
    with device.capture(1, device.graph_pool()) as graph:
        out = x.sum() * 0 + device.host_param("lens", [3, 4]).sum()
    graph.replay(1)
    device.synchronize()
    assert int(out) == 7
    graph.update_params(lens=[10, 20])
    graph.replay(1)
    device.synchronize()
    assert int(out) == 30
    with pytest.raises(GraphError):
        graph.update_params(not_there=[1])


@pytest.mark.needs("poisons_unsynced_copies")
def test_unsynchronized_copy_holds_poison(device, buffers):
    x, _ = buffers
    host = device.pinned(tuple(x.shape), x.dtype)
    event = device.to_host(x, host, non_blocking=True)
    assert torch.isnan(host).all()
    event.synchronize()
    torch.testing.assert_close(host, x.cpu())


def test_blocking_copy_is_immediate(device, buffers):
    x, _ = buffers
    host = device.pinned(tuple(x.shape), x.dtype)
    device.to_host(x, host, non_blocking=False)
    torch.testing.assert_close(host, x.cpu())


def test_host_syncs_are_counted_per_call_site(device, buffers):
    x, _ = buffers
    with device.watch_host_syncs() as log:
        x.sum().item()
        x.tolist()
        x[x > 0]
    assert log.total == 3
    assert all(site.startswith("tests/properties/test_device_contract.py:") for _, site in log.counts)


def _gather_rank(rank: int, world: int, init: str, device_name: str, gather: str, out) -> None:
    from devices import load_device
    from devices.collectives import init_group
    from devices.plugins import import_object

    if device_name != "sim":
        getattr(torch, device_name).set_device(rank)
    device = load_device(device_name)
    init_group(device_name, rank, world, init, timeout_s=30)
    rows = torch.arange(3, device=device.torch_device) + 10 * rank
    out.put((rank, import_object(gather)(rows).cpu().tolist()))


def check_all_gather(device, gather: str = "devices.collectives:all_gather_rows", world: int = 2) -> None:
    """Every rank gets every rank's rows, rank 0's first."""
    if world > device.max_ranks:
        pytest.skip(f"device {device.name} hosts {device.max_ranks} rank, not {world}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    ctx = rank_context(device.name)
    out = ctx.Queue()
    procs = [ctx.Process(target=_gather_rank, args=(r, world, init, device.name, gather, out)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    want = [v for r in range(world) for v in (10 * r, 10 * r + 1, 10 * r + 2)]
    assert got == {r: want for r in range(world)}, f"all-gather gave {got}, want {want} on every rank"


def test_all_gather_is_rank_major(device):
    check_all_gather(device)
