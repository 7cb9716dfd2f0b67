"""What MRV2's model runner hands ``MTPSpeculator.propose``, from the core's batch and sampled tokens.

MRV2's runner passes an ``InputBatch`` (the target's ids, positions, ``query_start_loc``,
``seq_lens``, request-state indices), the rejection sampler's ``num_sampled`` and ``num_rejected``,
and two request-state rows: ``last_sampled`` (the last token each request sampled) and
``next_prefill_tokens`` (a chunked prefill's next prompt token). The runner computes them with
vLLM's kernels, and so does this module:

- ``num_sampled``: the sampler's count per request. The core's padded row carries the same fact
  as placeholders (-1 or >= vocab after the sampled ids); the count is that row's valid prefix,
  or the list's length unpadded. MRV2 has no other form (divergence ``no-unpadded-path``).
- ``get_num_sampled_and_rejected`` (vLLM): a chunked prefill (``seq_len < prefill_len``) samples
  nothing and rejects nothing; otherwise ``num_rejected = logits - num_sampled``.
- ``post_update`` (vLLM): ``last_sampled[r] = sampled[r, num_sampled - 1]`` where it sampled.
- ``next_prefill_tokens[r]``: the request's token at ``seq_len``, which MRV2's runner reads
  from ``all_token_ids`` at ``num_computed + query_len``: the core's backup.

The runner's request-state index of batch row r is r; a discarded request (the core's partial
prefill) is described with ``prefill_len = seq_len + 1``, every other with ``prefill_len = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from sim.impls.vllm.interop import import_vllm


@dataclass
class RunnerInputs:
    """One call's arguments of ``propose`` besides attention metadata and hidden states."""

    input_batch: SimpleNamespace
    num_sampled: torch.Tensor  # int32 [B], after get_num_sampled_and_rejected
    num_rejected: torch.Tensor  # int32 [B]
    last_sampled: torch.Tensor  # int64 [max_num_reqs], request-state rows
    next_prefill_tokens: torch.Tensor  # int32 [max_num_reqs]


def sampled_counts(sampled: SampledTokens, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sampled rows [B, K+1] int64, num_sampled [B] int32) as MRV2's rejection sampler returns them."""
    if sampled.is_padded:
        rows = sampled.padded.to(torch.int64)
        valid = (rows >= 0) & (rows < vocab_size)
        counts = valid.to(torch.int32).cumprod(dim=1).sum(dim=1, dtype=torch.int32)  # the valid prefix
        return rows, counts
    width = max([len(x) for x in sampled.lists] + [1])
    rows = torch.full((len(sampled.lists), width), -1, dtype=torch.int64)
    for r, ids in enumerate(sampled.lists):
        rows[r, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.int64)
    return rows, torch.tensor([len(x) for x in sampled.lists], dtype=torch.int32)


def input_batch(batch: VerifiedBatch) -> SimpleNamespace:
    """The part of MRV2's ``InputBatch`` that ``propose`` and its kernels read."""
    b, qsl_np = batch.num_reqs, np.asarray(batch.query_start_loc_cpu, dtype=np.int32)
    seq_cpu = torch.as_tensor(np.asarray(batch.seq_lens_cpu), dtype=torch.int32)
    return SimpleNamespace(
        num_reqs=b,
        num_tokens=batch.num_tokens,
        num_tokens_after_padding=batch.num_tokens,
        num_scheduled_tokens=np.diff(qsl_np),
        query_start_loc=batch.query_start_loc.to(torch.int32).clone(),
        query_start_loc_np=qsl_np,
        seq_lens=batch.seq_lens.to(torch.int32).clone(),
        seq_lens_cpu_upper_bound=seq_cpu,
        idx_mapping=torch.arange(b, dtype=torch.int64),
        input_ids=batch.token_ids[: batch.num_tokens].to(torch.int32).clone(),
        positions=batch.positions[: batch.num_tokens].to(torch.int64).clone(),
        decode_graph_eligible=False,
    )


def runner_inputs(batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int, max_num_reqs: int) -> RunnerInputs:
    """The runner's side of one propose call, its counts and request states by vLLM's kernels."""
    ib_module = import_vllm("vllm.v1.worker.gpu.input_batch")
    view = input_batch(batch)
    b = batch.num_reqs
    rows, num_sampled = sampled_counts(sampled, vocab_size)
    discarded = torch.as_tensor(np.asarray(sampled.discarded, dtype=bool))
    prefill_len = torch.where(discarded, view.seq_lens + 1, 0).to(torch.int32)
    logits = torch.as_tensor(np.asarray(batch.num_draft_tokens_cpu), dtype=torch.int32) + 1
    cu_num_logits = torch.cat([torch.zeros(1, dtype=torch.int32), logits.cumsum(0, dtype=torch.int32)])
    num_sampled, num_rejected = ib_module.get_num_sampled_and_rejected(
        num_sampled, view.seq_lens, cu_num_logits, view.idx_mapping, prefill_len
    )
    last_sampled = torch.zeros(max_num_reqs, 1, dtype=torch.int64)
    ib_module.post_update(
        view.idx_mapping,
        torch.zeros(max_num_reqs, dtype=torch.int32),  # num_computed_tokens: the runner's, not read back
        last_sampled,
        None,
        rows.contiguous(),
        num_sampled,
        num_rejected,
        view.query_start_loc,
        torch.zeros(max_num_reqs, rows.shape[1], dtype=torch.int32),  # all_token_ids: written, not read
        torch.zeros(max_num_reqs, dtype=torch.int32),  # total_len
    )
    next_prefill = torch.zeros(max_num_reqs, dtype=torch.int32)
    next_prefill[:b] = torch.as_tensor(np.asarray(sampled.backup), dtype=torch.int32)
    return RunnerInputs(view, num_sampled, num_rejected, last_sampled.view(-1), next_prefill)
