"""The fake ``torch.npu``'s synchronizations land the simulator's poisoned copies (``early_copies``).

vllm-ascend's runner copies its valid sampled-token counts to a host buffer the way
``_copy_valid_sampled_token_count`` does (on a side stream, ``counts_cpu[:n].copy_(counts,
non_blocking=True)``, then ``event.record()``) and reads them after ``event.synchronize()``. With the
check on, that buffer holds poison until the event, ``torch.npu.synchronize()`` or a stream's
``synchronize()``; the proposer's own buffers (built on ``cpu:0``) are device tensors.
"""

from __future__ import annotations

import pytest
import torch

from devices.sim import early_reads
from devices.sim.device import poison_value
from sim.impls.kit.ascend import early_copies
from sim.impls.vllm_ascend.build import configured

pytestmark = pytest.mark.needs("poisons_unsynced_copies")


def _counts(device):
    with early_reads.recording():
        return torch.tensor([2, 1, 3], dtype=torch.int32, device=early_reads.SIM_DEVICE)


def test_the_runners_count_copy_is_poisoned_until_its_event_is_synchronized(device):
    counts = _counts(device)
    counts_cpu = torch.zeros(8, dtype=torch.int32)
    event, side = torch.npu.Event(), torch.npu.Stream()
    with early_reads.tracking(device):
        with torch.npu.stream(side):
            side.wait_stream(torch.npu.current_stream())
            counts_cpu[: counts.shape[0]].copy_(counts, non_blocking=True)
            event.record()
        early = counts_cpu[:3].tolist()
        event.synchronize()
        late = counts_cpu[:3].tolist()
    assert early == [poison_value(torch.int32)] * 3
    assert late == counts.tolist()


@pytest.mark.parametrize("sync", ["torch.npu.synchronize", "stream.synchronize"])
def test_a_device_or_stream_synchronize_lands_a_copy(device, sync):
    counts = _counts(device)
    with early_reads.tracking(device):
        host = counts.to("cpu", non_blocking=True)
        assert host.tolist() == [poison_value(torch.int32)] * 3
        torch.npu.synchronize() if sync == "torch.npu.synchronize" else torch.npu.current_stream().synchronize()
        assert host.tolist() == counts.tolist()


def test_an_event_recorded_before_the_copy_does_not_land_it(device):
    counts = _counts(device)
    event = torch.npu.Event()
    with early_reads.tracking(device):
        event.record()
        host = counts.to("cpu", non_blocking=True)
        event.synchronize()
        assert host.tolist() == [poison_value(torch.int32)] * 3
        torch.npu.synchronize()
        assert host.tolist() == counts.tolist()


def test_the_proposers_buffers_are_device_tensors_and_the_call_inputs_are_named(device):
    p = configured(2, 16, 64, 8)
    assert p.device == early_reads.SIM_DEVICE
    assert early_reads.is_device_tensor(p.input_ids) and early_reads.is_device_tensor(p.hidden_states)
    inputs = type("Inputs", (), {})()
    inputs.ids = torch.arange(4)
    with early_copies.checked(device, inputs) as mode:
        assert early_reads.is_device_tensor(inputs.ids)
        assert mode.sim is device
