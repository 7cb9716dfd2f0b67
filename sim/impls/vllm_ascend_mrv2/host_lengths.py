"""The host lengths vllm-ascend's MRV2 runner hands its speculator, from the counts its device keeps.

NPU attention reads host lengths (``seq_lens_list``); vLLM's MRV2 runner keeps each request's computed count on
the device, where its ``postprocess_sampled`` (``post_update``) lowers it by the step's rejected drafts. So
vllm-ascend's runner, after that postprocess, copies the device counts to the host on a stream of its own
(``_copy_num_computed_tokens_to_cpu``, its event recorded after the copy: its own ``postprocess_sampled``), and the
next step's ``prepare_inputs`` waits for that event and lays each scheduled request's ``num_computed +
num_scheduled`` out in batch order through the request's state row (``_update_seq_lens_cpu``). Those lengths are
the input batch's ``seq_lens_np``: what the target's metadata and the speculator's host-length updates read.

Here those methods run as the checkout has them, on an instance of its ``NPUModelRunner`` whose constructor is not
run (``runner_view``: the attributes they read; its request states and input buffers its own classes', holding a
call's counts and rows; its sampler a view without penalties: plumbing), under the simulator's early-read
check: a host read before the copy lands reads poison. ``seq_lens_as_handed`` gives a call its lengths from the
device counts the last step left (each request's computed tokens before the call) in its state row
(``mrv2_runner.state_rows``); ``handoff`` runs the call's own postprocess and the next step's preparation. Every request is one of the scheduler's cached requests (its count from the
device's copy); a new request's count, which the runner takes from the scheduler when the request is added, is the
same number and is not told apart.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import VerifiedBatch
from sim.impls.kit import mrv2_runner
from sim.impls.kit.ascend import early_copies
from sim.impls.kit.ascend.host_memory import host_memory_as_uva, unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend_mrv2 import graphs

RUNNER = "vllm_ascend.worker.v2.model_runner"
DEVICE = torch.device("cpu", 0)  # a device tensor of the simulator (``devices.sim.early_reads``)


def runner_view(counts: torch.Tensor, req_ids: list[str], state: list[int], width: int, num_spec_tokens: int = 1):
    """The checkout's ``NPUModelRunner`` holding ``counts`` (its device's computed counts, by state row) for the
    requests ``req_ids`` in state rows ``state``; ``width``: its token rows' (a step's sampled tokens at most); its
    prompt lengths and drafts (``num_spec_tokens`` a row) zero until set."""
    cls = import_ascend(RUNNER).NPUModelRunner
    runner = cls.__new__(cls)
    rows = counts.shape[0]
    runner.speculator = object()  # main copies and waits only where a speculator drafts
    runner.is_last_pp_rank = True
    runner.sampler = SimpleNamespace(penalties_state=SimpleNamespace(output_bin_counts=None))
    model_state = import_ascend("vllm_ascend.worker.v2.model_states.default").AscendModelState
    runner.model_state = model_state.__new__(model_state)  # its postprocess_state is vllm-ascend's
    # its own request states and input buffers at these sizes, holding the view's counts and rows
    states_cls = import_ascend("vllm_ascend.worker.v2.states").AscendRequestState
    buffers_cls = import_ascend("vllm_ascend.worker.v2.input_batch").AscendInputBuffers
    with host_memory_as_uva(), unpinned_host_memory():
        runner.req_states = states_cls(
            max_num_reqs=rows, max_model_len=width, max_num_batched_tokens=width, num_speculative_steps=num_spec_tokens,
            vocab_size=1, device=DEVICE,
        )  # fmt: skip
        runner.input_buffers = buffers_cls(max_num_reqs=rows, max_num_tokens=width, device=DEVICE)
    runner.req_states.num_computed_tokens.gpu.copy_(counts)
    runner.req_states.req_id_to_index = dict(zip(req_ids, state))
    runner.num_computed_tokens_stream = torch.npu.Stream()
    runner.num_computed_tokens_event = torch.npu.Event()
    runner.num_computed_tokens_cpu = torch.empty(rows, dtype=torch.int32)
    return runner


def laid_out(runner, req_ids: list[str], queries: list[int], cached: list[str] | None = None) -> np.ndarray:
    """The host lengths of a step scheduling ``queries`` tokens of ``req_ids`` (batch order), as the runner's
    ``_update_seq_lens_cpu`` lays them out; ``cached``: the scheduler's cached requests among them (default: all)."""
    output = import_ascend("vllm.v1.core.sched.output")
    scheduled = dataclasses.replace(
        output.SchedulerOutput.make_empty(),
        num_scheduled_tokens=dict(zip(req_ids, queries)),
        scheduled_cached_reqs=dataclasses.replace(
            output.CachedRequestData.make_empty(), req_ids=list(req_ids if cached is None else cached)
        ),
    )
    runner._update_seq_lens_cpu(scheduled, list(req_ids))
    return runner.input_buffers.seq_lens_cpu[: len(req_ids)].numpy().copy()


def device_counts(batch: VerifiedBatch, state: torch.Tensor, rows: int) -> torch.Tensor:
    """The device's counts before ``batch``'s step: each request's computed tokens, in its state row."""
    seq = np.asarray(batch.seq_lens_cpu, dtype=np.int32)
    query = np.diff(np.asarray(batch.query_start_loc_cpu, dtype=np.int32))
    counts = torch.zeros(rows, dtype=torch.int32, device=DEVICE)
    counts[state] = torch.from_numpy(seq - query)
    return counts


def seq_lens_as_handed(device, batch: VerifiedBatch, max_num_reqs: int) -> np.ndarray:
    """The host lengths of ``batch``'s requests (int32 [max_num_reqs], batch order, 0 past the batch) as the runner
    hands them: request r's device count in its state row (``mrv2_runner.state_rows``), copied and laid out by the
    checkout's own ``_copy_num_computed_tokens_to_cpu`` and ``_update_seq_lens_cpu``."""
    b = batch.num_reqs
    state = mrv2_runner.state_rows(b)
    req_ids = [f"r{r}" for r in range(b)]  # the input batch's (``mrv2_runner.input_batch``)
    query = np.diff(np.asarray(batch.query_start_loc_cpu, dtype=np.int32)).tolist()
    with early_copies.checked(device), graphs.cuda_as_npu():
        runner = runner_view(device_counts(batch, state, max_num_reqs), req_ids, state.tolist(), 1)
        runner._copy_num_computed_tokens_to_cpu()  # the last step's postprocess
        out = np.zeros(max_num_reqs, dtype=np.int32)
        out[:b] = laid_out(runner, req_ids, query)  # this step's prepare_inputs
    return out
