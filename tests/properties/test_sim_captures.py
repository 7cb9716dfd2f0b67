"""What a graph capture of the simulator refuses, where it knows host tensors from device ones
(``devices.sim.graph``): reading a host tensor back is no sync, as the host's own code reads no device on
an NPU; a read of a device tensor is a host sync whatever a tracker knows; with no tracker on, every
read is one. A kernel launched through ``graph.launch`` is captured as one launch and runs again
at each replay, on the captured tensors."""

from __future__ import annotations

import pytest
import torch

from devices.sim import early_reads
from devices.sim import graph as sim_graph
from devices.sync_watch import HostSyncError

DEV = early_reads.SIM_DEVICE


def _device_buffer(n: int = 4) -> torch.Tensor:
    with early_reads.recording():
        return torch.zeros(n, dtype=torch.int32, device=DEV)


def test_host_reads_under_a_tracker_are_no_syncs_in_a_capture():
    out, lengths = _device_buffer(), torch.tensor([3, 5, 7, 9], dtype=torch.int32)
    with early_reads.tracking(None):
        with sim_graph.capture(4) as graph:
            host = (lengths + 1).tolist()  # host code: the lists a kernel is handed at capture
            first = int(lengths[0].item())
            made = torch.tensor(host, dtype=torch.int32)  # a host tensor from host data: no copy
            out.copy_(made)  # the host->device copy is the graph's
    assert host == [4, 6, 8, 10] and first == 3 and out.tolist() == host
    out.zero_()
    graph.replay(4)
    assert out.tolist() == [4, 6, 8, 10]


@pytest.mark.parametrize("read", ["tolist", "item"])
def test_reading_a_device_tensor_in_a_capture_is_a_sync_under_a_tracker(read):
    dev = _device_buffer()
    with early_reads.tracking(None), pytest.raises(HostSyncError, match="inside a graph capture"):
        with sim_graph.capture(4):
            getattr(dev[:1] if read == "item" else dev, read)()


def test_building_a_device_tensor_from_host_data_in_a_capture_is_refused_under_a_tracker():
    with early_reads.tracking(None), pytest.raises(HostSyncError, match="pageable host->device copy"):
        with sim_graph.capture(4):
            torch.tensor([1, 2], device=DEV)


def test_without_a_tracker_every_read_in_a_capture_is_a_sync():
    host = torch.tensor([1, 2, 3])
    with pytest.raises(HostSyncError, match="inside a graph capture"):
        with sim_graph.capture(4):
            host.tolist()


def test_a_launched_kernel_runs_again_at_each_replay_on_the_captured_tensors():
    x, y = torch.zeros(4), torch.zeros(4)

    def kernel():  # reads and writes its tensors itself, as an interpreted Triton kernel does through host copies
        with torch._C.DisableTorchFunction():
            y.copy_(torch.from_numpy(x.numpy() + 1))

    with sim_graph.capture(4) as graph:
        sim_graph.launch(kernel)
        z = y * 2
    assert y.tolist() == [1.0] * 4 and z.tolist() == [2.0] * 4
    x.fill_(10)
    graph.replay(4)
    assert y.tolist() == [11.0] * 4 and z.tolist() == [22.0] * 4
    sim_graph.launch(kernel)  # outside a capture: it just runs
    assert y.tolist() == [11.0] * 4
