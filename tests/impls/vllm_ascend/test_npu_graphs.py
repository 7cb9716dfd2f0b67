"""The fake ``torch.npu`` graph API (``fake_npu_graphs``) under vllm-ascend's own ``ACLGraphWrapper``.

The wrapper captures a runnable on its first call per batch descriptor and replays it after; the
simulator's recorder underneath keeps an NPU's rules: a replay reruns the captured ops on the
captured tensors, at the captured size only; Python values are frozen at capture; a captured task's
parameters change only through ``graph_task_update_begin/end``.
"""

from __future__ import annotations

import pytest
import torch

from devices.base import GraphError
from devices.sim import SimDevice, early_reads
from devices.sim.host_params import host_param_op
from devices.sim.streams import StreamOrderError
from sim.impls.kit.ascend import fake_npu_graphs
from sim.impls.kit.ascend.importing import import_ascend


@pytest.fixture
def wrapped():
    """(wrapper, buffer, forward(n)): vllm-ascend's FULL ``ACLGraphWrapper`` around ``x * 2 + lens``,
    ``lens`` a host list read through a task; ``forward(n, lens)`` runs it in a forward context of n tokens."""
    config = import_ascend("vllm.config")
    ctx = import_ascend("vllm_ascend.ascend_forward_context")
    acl = import_ascend("vllm_ascend.compilation.acl_graph")
    monitor = import_ascend("vllm.compilation.monitor")
    from sim.impls.vllm_ascend.build import ascend_proposer

    vllm_config = ascend_proposer(16).vllm_config
    x = torch.zeros(8)
    tasks = []

    def runnable(n, lens, event=None):
        """As an attention backend captures a kernel: an event to wait for its update, then the task."""
        if fake_npu_graphs.is_current_stream_capturing():
            stream = torch.npu.current_stream()
            if event is not None:
                event.wait(stream)
                event.reset(stream)
            torch.npu.graph_task_group_begin(stream)
            host = host_param_op("lens", lens)
            tasks.append(torch.npu.graph_task_group_end(stream))
        else:
            host = host_param_op("lens", lens)
        return x[:n] * 2 + host[:n]

    wrapper = acl.ACLGraphWrapper(runnable, vllm_config, runtime_mode=config.CUDAGraphMode.FULL)
    forward_context = import_ascend("vllm.forward_context")

    def forward(n, lens, key=None, event=None):
        desc = forward_context.BatchDescriptor(num_tokens=key or n)
        with ctx.set_ascend_forward_context(
            None, vllm_config, num_tokens=n, aclgraph_runtime_mode=config.CUDAGraphMode.FULL, batch_descriptor=desc
        ):
            return wrapper(n, lens, event)

    monitor.set_cudagraph_capturing_enabled(True)
    yield wrapper, x, forward, tasks
    fake_npu_graphs.reset()


def test_a_replay_reruns_the_capture_on_the_captured_buffers(wrapped):
    _, x, forward, _ = wrapped
    x.copy_(torch.arange(8.0))
    out = forward(4, [1, 1, 1, 1])  # capture
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0]
    x.fill_(10.0)
    again = forward(4, [1, 1, 1, 1])  # replay: the new buffer contents, the captured output tensor
    assert again is not out or again.data_ptr() == out.data_ptr()
    assert again.tolist() == [21.0] * 4


def test_host_values_stay_frozen_at_capture_until_the_task_is_updated(wrapped):
    _, x, forward, tasks = wrapped
    forward(4, [1, 1, 1, 1])
    assert forward(4, [5, 5, 5, 5]).tolist() == [1.0] * 4, "a replay saw a host list it was not updated with"
    (task,) = tasks
    _update(task, [5, 6, 7, 8])  # what update_graph_params issues: the kernel with new host params
    assert forward(4, [0, 0, 0, 0]).tolist() == [5.0, 6.0, 7.0, 8.0]


def _update(task, lens):
    torch.npu.graph_task_update_begin(torch.npu.current_stream(), task)
    host_param_op("lens", lens)
    torch.npu.graph_task_update_end(torch.npu.current_stream())


def test_a_replay_whose_tasks_wait_on_an_event_runs_once_the_update_records_it(wrapped):
    """vllm-ascend launches the replay, then updates the tasks and records their events; the tasks
    wait for the events, so the replay sees the update."""
    _, x, forward, tasks = wrapped
    event = torch.npu.ExternalEvent()
    forward(4, [1, 1, 1, 1], event=event)
    x.fill_(1.0)
    out = forward(4, [0, 0, 0, 0], event=event)  # launched, waiting
    assert out.tolist() == [1.0] * 4, "the replay ran before its event was recorded"  # still the capture's
    _update(tasks[0], [2, 2, 2, 2])
    event.record(torch.npu.current_stream())
    assert out.tolist() == [4.0] * 4
    torch.npu.synchronize()


def test_a_replay_runs_on_the_stream_that_launched_it_after_the_update(wrapped):
    """vllm-ascend launches a replay on its current stream, then updates the tasks on its update stream
    and records their event there (``update_full_graph_params``). The replay's work is the launching
    stream's, after the update: a copy stream that waited for the launching stream reads its output, and
    one that waited for nothing is named with the launching stream, not the update stream."""
    _, x, forward, tasks = wrapped
    update, copies, unordered = torch.npu.Stream(), torch.npu.Stream(), torch.npu.Stream()
    event = torch.npu.ExternalEvent()
    host = torch.zeros(4)
    with early_reads.tracking(SimDevice(), x):
        forward(4, [1, 1, 1, 1], event=event)  # the capture
        out = forward(4, [0, 0, 0, 0], event=event)  # launched on the default stream, waiting for the update
        with torch.npu.stream(update):
            _update(tasks[0], [2, 2, 2, 2])
            event.record(update)
        launcher = torch.npu.current_stream()
        with torch.npu.stream(copies):
            copies.wait_stream(launcher)
            host.copy_(out, non_blocking=True)
            copied = torch.npu.Event()
            copied.record()
        copied.synchronize()
        assert host.tolist() == [2.0] * 4
        with torch.npu.stream(unordered), pytest.raises(StreamOrderError, match="last written on the default stream"):
            host.copy_(out, non_blocking=True)


def test_waiting_for_a_replay_whose_event_is_never_recorded_is_refused(wrapped):
    """On an NPU a stream would wait forever: a graph whose tasks were never updated."""
    _, _, forward, _ = wrapped
    event = torch.npu.ExternalEvent()
    forward(4, [1, 1, 1, 1], event=event)
    forward(4, [1, 1, 1, 1], event=event)
    with pytest.raises(GraphError, match="never recorded"):
        torch.npu.current_stream().synchronize()


def test_a_replay_at_another_size_is_refused(wrapped):
    _, _, forward, _ = wrapped
    forward(4, [1, 1, 1, 1])
    with pytest.raises(GraphError, match="captured at size 4"):
        forward(2, [1, 1], key=4)  # the graph of descriptor 4 replayed in a forward of 2 tokens


def test_a_host_sync_inside_a_capture_is_refused():
    from devices.sync_watch import HostSyncError

    x = torch.ones(2)
    with pytest.raises(HostSyncError):
        with torch.npu.graph(torch.npu.NPUGraph()):
            int(x.sum())


def test_an_update_of_an_op_the_task_never_captured_is_refused(wrapped):
    _, _, forward, tasks = wrapped
    forward(4, [1, 1, 1, 1])
    torch.npu.graph_task_update_begin(torch.npu.current_stream(), tasks[0])
    with pytest.raises(GraphError, match="no such op"):
        torch.ones(2).exp()
    torch.npu.graph_task_update_end(torch.npu.current_stream())
