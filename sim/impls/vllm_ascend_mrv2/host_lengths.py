"""The host lengths vllm-ascend's MRV2 runner hands its speculator, from the counts its device keeps.

NPU attention reads host lengths (``seq_lens_list``); vLLM's MRV2 runner keeps each request's computed count on
the device, where ``post_update`` lowers it by the step's rejected drafts. So vllm-ascend's runner copies the
device counts to the host on a stream of its own after each step's postprocess (``_copy_num_computed_tokens_to_cpu``,
its event recorded after the copy), and the next step's ``prepare_inputs`` waits for that event and lays each
scheduled request's ``num_computed + num_scheduled`` out in batch order through the request's state row
(``_update_seq_lens_cpu``). Those lengths are the input batch's ``seq_lens_np``: what the speculator's host-length
updates start from and what the step's attention state is built from.

Here both methods run as the checkout has them, on a view of the runner (its request states, the copy's stream,
event and host buffer, its input buffers' host lengths: plumbing), from the device counts the last step left (each
request's computed tokens before this call) in its state row (``mrv2_runner.state_rows``), under the simulator's
early-read check: a host read before the copy lands reads poison. Every request of the call is one of the
scheduler's cached requests (its count from the device's copy); a new request's count, which the runner takes from
the scheduler when the request is added, is the same number and is not told apart.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import VerifiedBatch
from sim.impls.kit.ascend import early_copies
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend_mrv2 import graphs

RUNNER = "vllm_ascend.worker.v2.model_runner"
DEVICE = torch.device("cpu", 0)  # a device tensor of the simulator (``devices.sim.early_reads``)


def seq_lens_as_handed(device, batch: VerifiedBatch, state: torch.Tensor, max_num_reqs: int) -> np.ndarray:
    """The host lengths of ``batch``'s requests (int32 [max_num_reqs], batch order, 0 past the batch) as the runner
    hands them: request r's device count in state row ``state[r]``, copied and laid out by the checkout's own
    ``_copy_num_computed_tokens_to_cpu`` and ``_update_seq_lens_cpu``."""
    runner = import_ascend(RUNNER).NPUModelRunner
    b = batch.num_reqs
    seq = np.asarray(batch.seq_lens_cpu, dtype=np.int32)
    query = np.diff(np.asarray(batch.query_start_loc_cpu, dtype=np.int32))
    req_ids = [f"r{r}" for r in range(b)]  # the input batch's (``mrv2_runner.input_batch``)
    output = import_ascend("vllm.v1.core.sched.output")
    scheduled = dataclasses.replace(
        output.SchedulerOutput.make_empty(),
        num_scheduled_tokens=dict(zip(req_ids, query.tolist())),
        scheduled_cached_reqs=dataclasses.replace(output.CachedRequestData.make_empty(), req_ids=req_ids),
    )
    with early_copies.checked(device), graphs.cuda_as_npu():
        counts = torch.zeros(max_num_reqs, dtype=torch.int32, device=DEVICE)  # made on the device
        counts[state] = torch.from_numpy(seq - query)  # what the last step's post_update left there
        view = SimpleNamespace(
            speculator=object(),  # main copies and waits only where a speculator drafts
            req_states=SimpleNamespace(
                num_computed_tokens=SimpleNamespace(gpu=counts),
                num_computed_tokens_cpu=torch.zeros(max_num_reqs, dtype=torch.int32),
                req_id_to_index={rid: int(s) for rid, s in zip(req_ids, state.tolist())},
            ),
            num_computed_tokens_stream=torch.npu.Stream(),
            num_computed_tokens_event=torch.npu.Event(),
            num_computed_tokens_cpu=torch.empty(max_num_reqs, dtype=torch.int32),
            input_buffers=SimpleNamespace(seq_lens_cpu=torch.zeros(max_num_reqs, dtype=torch.int32)),
        )
        runner._copy_num_computed_tokens_to_cpu(view)  # the last step's postprocess
        runner._update_seq_lens_cpu(view, scheduled, req_ids)  # this step's prepare_inputs
        out = np.zeros(max_num_reqs, dtype=np.int32)
        out[:b] = view.input_buffers.seq_lens_cpu[:b].numpy()
    return out
