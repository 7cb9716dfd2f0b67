"""The reads of host tensors an implementation names are exempt from the sync property, and nothing else is."""

from __future__ import annotations

import traceback

import pytest
import torch

from devices.sync_watch import watch_host_syncs
from sim.impls.kit.host_reads import ADAPTER_CODE, HostRead, device_syncs

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

HERE = "tests/harness/test_host_reads.py"


def _two_reads(host: torch.Tensor, device: torch.Tensor) -> int:
    total = host[-1].item()
    return total + int(device.max())


def _log():
    with watch_host_syncs() as log:
        _two_reads(torch.arange(4), torch.arange(3))
    return log


def test_a_named_read_is_exempt_and_the_other_is_not():
    named = HostRead("Tensor.item", HERE, "_two_reads", "total = host[-1].item()", "the host tensor")
    left = device_syncs(_log(), (named,))
    assert [(op, site.split(":")[0]) for op, site in left] == [("aten._local_scalar_dense", HERE)]


def test_a_read_named_by_another_line_or_function_is_not_exempt():
    log = _log()
    for read in (
        HostRead("Tensor.item", HERE, "_two_reads", "total = host[0].item()", "another line"),
        HostRead("Tensor.item", HERE, "_log", "total = host[-1].item()", "another function"),
        HostRead("Tensor.tolist", HERE, "_two_reads", "total = host[-1].item()", "another operation"),
        HostRead("Tensor.item", "tests/other.py", "_two_reads", "total = host[-1].item()", "another file"),
    ):
        assert sum(device_syncs(log, (read,)).values()) == 2, read.reads


def test_the_adapters_own_code_is_not_under_test():
    log = _log()
    site = next(iter(log.counts))[1]
    frame = log.frames[site]
    log.frames[site] = traceback.FrameSummary(
        ADAPTER_CODE + "kit/vllm_interop.py", frame.lineno, frame.name, line=frame.line
    )
    assert sum(device_syncs(log).values()) == 1
