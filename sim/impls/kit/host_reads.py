"""Reads of host tensors that the sync watcher cannot tell from device syncs on a CPU run.

On the ``sim`` device every tensor is a CPU tensor, so vllm-ascend's
``query_start_loc_cpu[-1].item()`` (a host mirror: no sync on an NPU) counts as
a host sync, as ``seq_lens.max().item()`` on a device tensor would. An
implementation names the host reads its own code makes, each by operation,
file, function and source line, with the host tensor it reads; the padded-path
property holds every other read to none, so a device sync anywhere else, or a
named line that changes, fails. The adapters' own code (``sim/impls/``) is not
under test: it builds the runner's host-side inputs and stands in for the
attention backend, which keep host mirrors of their own.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

ADAPTER_CODE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # sim/impls/


@dataclass(frozen=True)
class HostRead:
    """op: as the watcher names it (``Tensor.item``). file: the path's tail (``vllm_ascend/spec_decode/
    llm_base_proposer.py``). function and code: the frame's function and source line. reads: the host tensor."""

    op: str
    file: str
    function: str
    code: str
    reads: str

    def matches(self, op: str, frame) -> bool:
        return (
            op == self.op
            and frame.filename.replace(os.sep, "/").endswith(self.file)
            and frame.name == self.function
            and (frame.line or "").strip() == self.code
        )


def device_syncs(log, host_reads=()) -> Counter:
    """The syncs of a ``devices.sync_watch.SyncLog`` that are neither adapter code nor a named host read."""
    left = Counter()
    for (op, site), n in log.counts.items():
        frame = log.frames.get(site)
        if frame is not None and os.path.abspath(frame.filename).startswith(ADAPTER_CODE):
            continue
        if frame is not None and any(read.matches(op, frame) for read in host_reads):
            continue
        left[(op, site)] = n
    return left


def prepare_inputs_padded_reads(file: str) -> tuple[HostRead, ...]:
    """The two host reads of vLLM's ``prepare_inputs_padded`` in ``file`` (vllm-ascend's copy has them too):
    the token count and the longest query, both from ``query_start_loc_cpu``."""
    return (
        HostRead(
            "Tensor.item",
            file,
            "prepare_inputs_padded",
            "total_num_tokens = query_start_loc_cpu[-1].item()",
            "query_start_loc_cpu, the host mirror",
        ),
        HostRead(
            "Tensor.item",
            file,
            "prepare_inputs_padded",
            "max_query_len=new_query_len_per_req.max().item(),",
            "the query lengths taken from query_start_loc_cpu",
        ),
    )
