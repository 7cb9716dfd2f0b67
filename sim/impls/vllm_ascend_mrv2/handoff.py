"""What vllm-ascend's MRV2 runner hands the step after a propose call, as its own code prepares that step.

After the speculator drafts, the runner keeps the drafts in its request states (``draft_tokens``, by state row)
and postprocesses the call's samples (its ``postprocess_sampled``: vLLM's ``post_update`` lowers each request's
device count by its rejected drafts and keeps its last sampled token; vllm-ascend's copies the counts to the host
on a stream of its own). The next step's ``prepare_inputs`` then lays out the host lengths (``_update_seq_lens_cpu``,
after the copy's event), copies a prefilling request's prompt tokens (``prepare_prefill_inputs``), computes the
device lengths (``prepare_pos_seq_lens``) and writes each decode's last sampled token and drafts into its input ids
(``combine_sampled_and_draft_tokens``): a synchronous or an asynchronous schedule alike, the scheduler's
placeholders replaced on the device.

Here the next step is the oracle's (``sim.oracle.next_step.next_rows``): the call's requests in reverse order, each a
decode of its drafts, with a new request's prompt among them (state row ``b``, the first the batch leaves free),
run through those methods and kernels of the checkout's runner (``host_lengths.runner_view``; where the runner
samples, the runner itself, its request states as its ``sample_tokens`` left them: ``sampling``). Each request's
prompt token past a chunk it did not finish is its request state's (the core's backup), as the scheduler handed the
runner its prompt. ``handed_on`` reads back per request the next step's input ids, its host length less its query
and its device count; and the new request's row. The token a request continues from is in its input ids (MRV2 keeps
no other), and a model without recurrent layers keeps no accepted-token count: those fields are None. A request
still in its prompt is handed a decode of drafts only where the env's vLLM schedules drafts beside a prompt's last
token (0.27 on); before, its input ids are not compared (``NextStep.unscheduled``): vLLM 0.23's kernel writes the
last sampled token over the prompt's, in a step its scheduler never makes.
"""

from __future__ import annotations

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from sim.impls.kit import mrv2_runner, vllm_schedule
from sim.impls.kit.ascend import early_copies
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend_mrv2 import graphs, sampling
from sim.impls.vllm_ascend_mrv2.host_lengths import DEVICE, device_counts, laid_out, runner_view
from sim.oracle.next_step import NEW_PROMPT, NextStep, next_rows

NEW = "new"  # the next step's new request


def handed_on(
    device, batch: VerifiedBatch, sampled: SampledTokens, run, drafts: torch.Tensor, vocab_size: int, runner=None
):
    """The ``NextStep`` the runner hands after ``batch``'s call (``run``: its ``mrv2_runner.RunnerInputs``; ``drafts``:
    the call's, [B, K]). ``runner``: the runner that sampled the call (``sampling``), its request states as its
    ``sample_tokens`` left them; else a view of one (``host_lengths.runner_view``) holding what the call's own
    postprocess leaves."""
    ib_module = import_ascend("vllm.v1.worker.gpu.input_batch")
    b, k, ib = batch.num_reqs, drafts.shape[1], run.input_batch
    state = ib.idx_mapping.tolist()
    seq = np.asarray(batch.seq_lens_cpu, dtype=np.int64)
    discarded = np.flatnonzero(np.asarray(sampled.discarded, dtype=bool))  # the requests still in their prompt
    order = next_rows(b)  # this call's row of each next row, None: the new request
    queries = [len(NEW_PROMPT) if i is None else 1 + k for i in order]
    logits = [1 if i is None else 1 + k for i in order]  # a prompt's one sample, or a decode's drafts and bonus
    req_ids = list(ib.req_ids)
    next_ids = [NEW if i is None else req_ids[i] for i in order]
    idx = torch.tensor([b if i is None else state[i] for i in order], dtype=torch.int32, device=DEVICE)
    qsl = torch.tensor(np.concatenate([[0], np.cumsum(queries)]), dtype=torch.int32, device=DEVICE)
    cu_logits = torch.tensor(np.concatenate([[0], np.cumsum(logits)]), dtype=torch.int32, device=DEVICE)
    with early_copies.checked(device), graphs.cuda_as_npu():
        if runner is None:
            width = int(seq.max()) + 2 * (1 + k) + len(NEW_PROMPT)  # every token a request has, and the next step's
            counts = device_counts(batch, ib.idx_mapping, b + 1)
            runner = runner_view(counts, [*req_ids, NEW], [*state, b], width, num_spec_tokens=k)
            postprocessed(runner, batch, sampled, run, drafts, vocab_size)
        else:
            sampling.arrive_new(runner, NEW, NEW_PROMPT, b)
        states = runner.req_states
        counts = states.num_computed_tokens.gpu
        # the next step's prepare_inputs: its host lengths, then its input ids on the device
        lens = laid_out(runner, next_ids, queries, cached=req_ids)
        input_ids = torch.full((int(qsl[-1]),), -1, dtype=torch.int32, device=DEVICE)  # the scheduler's placeholders
        # its next prompt tokens: not read here
        lookahead = torch.zeros(1, counts.shape[0], dtype=torch.int32, device=DEVICE)
        ib_module.prepare_prefill_inputs(
            input_ids, lookahead, idx, qsl, states.all_token_ids.gpu, states.prefill_len.gpu, counts
        )
        seq_lens = torch.zeros(len(order), dtype=torch.int32, device=DEVICE)
        positions = torch.zeros(int(qsl[-1]), dtype=torch.int64, device=DEVICE)
        ib_module.prepare_pos_seq_lens(idx, qsl, counts, positions, seq_lens)
        ib_module.combine_sampled_and_draft_tokens(
            input_ids, idx, states.last_sampled_tokens, qsl, seq_lens, states.prefill_len.gpu, states.draft_tokens,
            cu_logits, int(cu_logits[-1]),
        )  # fmt: skip
        row_ids = [input_ids[int(qsl[j]) : int(qsl[j + 1])].cpu() for j in range(len(order))]
        num_computed = counts.cpu()
    by_request = [order.index(r) for r in range(b)]
    new = order.index(None)
    corrected = lens - np.asarray(queries)
    return NextStep(
        next_tokens=None,
        valid_counts=None,
        seq_lens=torch.from_numpy(corrected[by_request]),
        input_ids=torch.stack([row_ids[j] for j in by_request]),
        num_computed=num_computed[ib.idx_mapping],
        num_accepted=None,
        new_request=torch.tensor([*row_ids[new].tolist(), int(lens[new]), int(num_computed[b])]),
        unscheduled=() if vllm_schedule.pads_last_prompt_tokens() else tuple(int(r) for r in discarded),
    )


def postprocessed(runner, batch: VerifiedBatch, sampled: SampledTokens, run, drafts: torch.Tensor, vocab_size: int):
    """A runner view (its request states as the call left them on the device: each request's tokens, prompt length and
    drafts in its state row, a new request's prompt in row ``b``) after the call's own ``postprocess_sampled``."""
    b, ib = batch.num_reqs, run.input_batch
    state = ib.idx_mapping.tolist()
    seq = np.asarray(batch.seq_lens_cpu, dtype=np.int64)
    states = runner.req_states
    states.total_len.gpu[ib.idx_mapping] = torch.from_numpy(seq).to(torch.int32)  # the tokens each one holds
    states.prefill_len.gpu[ib.idx_mapping] = torch.from_numpy(ib.prefill_len_np).to(torch.int32)
    states.prefill_len.gpu[b] = len(NEW_PROMPT)
    for r in np.flatnonzero(np.asarray(sampled.discarded, dtype=bool)):  # its prompt token past the chunk
        states.all_token_ids.gpu[state[r], seq[r]] = int(sampled.backup[r])
    states.all_token_ids.gpu[b, : len(NEW_PROMPT)] = torch.tensor(NEW_PROMPT, dtype=torch.int32)
    states.draft_tokens[ib.idx_mapping] = drafts.to(torch.int64)  # the runner's req_states.draft_tokens[idx_mapping]
    rows, _ = mrv2_runner.sampled_counts(sampled, vocab_size)
    runner.postprocess_sampled(ib.idx_mapping, rows.to(DEVICE), run.num_sampled, run.num_rejected, ib.query_start_loc)
