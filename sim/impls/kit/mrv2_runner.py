"""What MRV2's model runner hands its speculator's ``propose``, from the core's batch and sampled tokens.

Shared by every Model Runner V2 adapter (vLLM 0.33's ``MTPSpeculator``, vllm-ascend's MRV2
speculators on vLLM 0.23 / 0.27): the kernels it calls have the same signatures in each.

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

The runner's request-state row of each batch row is ``state_rows``'s (the batch in reverse): a runner's
``RequestState`` hands rows out as requests arrive, not in batch order. A discarded request (the core's
partial prefill) is described with ``prefill_len = seq_len + 1``, every other with ``prefill_len = 0``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.ops import PreparedCall
from sim.impls.kit import kernel_bounds, tiny_config
from sim.impls.kit.vllm_model import target_layers
from sim.impls.kit.vllm_types import import_vllm

CPU = torch.device("cpu")


@dataclass
class RunnerInputs:
    """One call's arguments of ``propose`` besides attention metadata and hidden states."""

    input_batch: object  # the generation's InputBatch
    num_sampled: torch.Tensor  # int32 [B], after get_num_sampled_and_rejected
    num_rejected: torch.Tensor  # int32 [B]
    last_sampled: torch.Tensor  # int64 [max_num_reqs], request-state rows
    next_prefill_tokens: torch.Tensor  # int32 [max_num_reqs]


def state_rows(num_reqs: int) -> torch.Tensor:
    """The request-state row of each of ``num_reqs`` batch rows (int64): the batch's rows in reverse. Every row of a
    batch of two or more moves, so code that reads a request's state (its last sampled token, next prompt token,
    block-table row, temperature) at its batch row reads another request's."""
    return torch.arange(num_reqs - 1, -1, -1, dtype=torch.int64)


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


def input_batch(batch: VerifiedBatch, discarded, cls=None, **extra):
    """MRV2's ``InputBatch`` of ``batch`` (``cls``: the generation's own subclass, with its ``extra``
    fields), every field as the runner's ``prepare_inputs`` makes it from the scheduler's step: request
    r in row r and in request-state row ``state_rows(b)[r]``, its drafts' logits after its last query
    row, the host bounds of the lengths exact, no padding, no structured output, no DCP or PCP. ``discarded`` (per request, the
    core's partial prefill) gives the prefill lengths: such a request is still prefilling
    (``prefill_len = seq_len + 1``), every other has prefilled (``prefill_len = 0``; a prompt that ends in
    this step is described so too, which no speculator's read tells apart). A field the
    generation requires that the harness does not make is a ``LookupError`` naming it, never a
    default."""
    cls = cls or import_vllm("vllm.v1.worker.gpu.input_batch").InputBatch
    b, t = batch.num_reqs, batch.num_tokens
    qsl_np = np.asarray(batch.query_start_loc_cpu, dtype=np.int32)
    seq_np = np.asarray(batch.seq_lens_cpu, dtype=np.int32)
    query = np.diff(qsl_np)
    drafts = np.asarray(batch.num_draft_tokens_cpu, dtype=np.int32)
    computed = seq_np - query
    prefill_len = np.where(np.asarray(discarded, dtype=bool), seq_np + 1, 0).astype(np.int32)
    computed_prefill = np.minimum(computed, prefill_len)
    prefilling = computed_prefill < prefill_len
    # vLLM 0.33's: a prefilling row of one new prompt token over computed context runs as a decode
    as_decode = prefilling & (query - drafts == 1) & (computed_prefill > 0)
    idx = state_rows(b)
    cu_logits_np = np.concatenate([[0], np.cumsum(drafts + 1)]).astype(np.int32)
    logit_req = np.repeat(np.arange(b), drafts + 1)  # each logits row's request
    ends = qsl_np[1:][logit_req]
    values = dict(
        req_ids=[f"r{r}" for r in range(b)],
        num_reqs=b,
        num_reqs_after_padding=b,
        idx_mapping=idx,
        idx_mapping_np=idx.numpy().astype(np.intp),
        expanded_idx_mapping=idx[torch.as_tensor(logit_req, dtype=torch.int64)],
        expanded_local_pos=torch.as_tensor(np.arange(len(logit_req)) - cu_logits_np[logit_req], dtype=torch.int32),
        num_scheduled_tokens=query,
        num_tokens=t,
        num_tokens_after_padding=t,
        num_draft_tokens=int(drafts.sum()),
        num_draft_tokens_per_req=drafts if drafts.any() else None,
        query_start_loc=batch.query_start_loc.to(torch.int32).clone(),
        query_start_loc_np=qsl_np,
        seq_lens=batch.seq_lens.to(torch.int32).clone(),
        seq_lens_cpu_upper_bound=torch.from_numpy(seq_np.copy()),
        dcp_local_seq_lens=None,
        num_computed_tokens_np=computed,
        prefill_len_np=prefill_len,
        num_computed_prefill_tokens_np=computed_prefill,
        is_prefilling_np=prefilling,
        has_prefill=bool(prefilling.any()),
        prefill_runs_as_decode_np=as_decode if prefilling.any() else None,
        decode_graph_eligible=bool((~prefilling | as_decode).all()),
        max_seq_len_np=None,
        input_ids=batch.token_ids[:t].to(torch.int32).clone(),
        positions=batch.positions[:t].to(torch.int64).clone(),
        is_padding=torch.zeros(t, dtype=torch.bool),
        logits_indices=torch.as_tensor(
            ends - (cu_logits_np[1:][logit_req] - np.arange(len(logit_req))), dtype=torch.int64
        ),
        cu_num_logits=torch.from_numpy(cu_logits_np.copy()),
        cu_num_logits_np=cu_logits_np,
        has_structured_output_reqs=False,
        prompt_lens=None,
        **extra,
    )
    return made(cls, **values)


def made(cls, **values):
    """The dataclass ``cls`` (a vLLM generation's) of those of ``values`` it has fields for; a field it requires that
    ``values`` lacks is a ``LookupError`` naming it, never a default."""
    fields = dataclasses.fields(cls)
    missing = [f.name for f in fields if f.name not in values and _required(f)]
    if missing:
        raise LookupError(f"{cls.__module__}.{cls.__qualname__}: fields {missing} not made by the harness")
    return cls(**{f.name: values[f.name] for f in fields if f.name in values})


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def runner_inputs(
    batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int, max_num_reqs: int, cls=None, **extra
) -> RunnerInputs:
    """The runner's side of one propose call, its counts and request states by vLLM's kernels (``cls``,
    ``extra``: the generation's own ``InputBatch``, as ``input_batch`` takes them)."""
    ib_module = import_vllm("vllm.v1.worker.gpu.input_batch")
    view = input_batch(batch, sampled.discarded, cls, **extra)
    rows, num_sampled = sampled_counts(sampled, vocab_size)
    prefill_len = torch.zeros(max_num_reqs, dtype=torch.int32)  # the request states' prompt lengths
    prefill_len[view.idx_mapping] = torch.from_numpy(view.prefill_len_np.copy())
    num_sampled, num_rejected = ib_module.get_num_sampled_and_rejected(
        num_sampled, view.seq_lens, view.cu_num_logits, view.idx_mapping, prefill_len
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
    next_prefill[view.idx_mapping] = torch.as_tensor(np.asarray(sampled.backup), dtype=torch.int32)
    return RunnerInputs(view, num_sampled, num_rejected, last_sampled.view(-1), next_prefill)


def prepared_call(
    prepare_prefill_inputs,
    buffers,
    cfg: ProposerConfig,
    batch: VerifiedBatch,
    sampled: SampledTokens,
    lowered: bool = True,
) -> PreparedCall:
    """Steps 1-3 as the core's ``PreparedCall``: the runner's counts, then MRV2's prefill kernel
    (``prepare_prefill_inputs``, the generation's) on ``buffers(num_reqs, num_tokens)``, fresh.

    ``accepted_seq_lens``: what later steps advance from; ``lowered``: the kernel's base
    ``seq_lens - num_rejected`` (vLLM's decode kernel), else the target's ``seq_lens`` (a host copy
    that is never lowered, vllm-ascend's ``host-seq-lens-not-lowered``).
    """
    b, t = batch.num_reqs, batch.num_tokens
    run = runner_inputs(batch, sampled, cfg.vocab_size, b)
    buf = buffers(b, t)
    last = torch.zeros(b, dtype=torch.int64)
    prepare_prefill_inputs(
        last, torch.tensor(0, dtype=torch.int64), buf, run.input_batch, run.num_sampled, run.num_rejected,
        run.last_sampled, run.next_prefill_tokens, b,
    )  # fmt: skip
    seq_lens = buf.seq_lens[:b].clone()
    slots = torch.full((cfg.max_num_tokens,), -1, dtype=torch.int64)
    slots[:t] = batch.slot_mapping[:t]  # the target's: MRV2's draft prefill reuses them
    first = FirstPassInputs(
        token_indices=torch.arange(t, dtype=torch.int64),
        query_start_loc=buf.query_start_loc[: b + 1].clone(),
        query_start_loc_cpu=run.input_batch.query_start_loc_np.astype(np.int64),
        seq_lens=seq_lens,
        accepted_seq_lens=((seq_lens - run.num_rejected) if lowered else seq_lens).to(torch.int32),
        slot_mapping=slots,
        sample_indices=last.clone(),
        num_rejected=run.num_rejected.to(torch.int32).clone(),
        max_query_len=int(run.input_batch.num_scheduled_tokens.max()),
    )
    nxt = NextTokens(next_token_ids=buf.input_ids[last].to(torch.int32), valid_counts=run.num_sampled.to(torch.int32))
    base = buf.positions[last].clone()  # what _prefill keeps as the decode steps' positions
    return PreparedCall(nxt, first, buf.input_ids[:t].to(torch.int64), batch.positions[:t], base)


def resize(spec, who: str, num_spec_tokens: int, max_model_len: int):
    """A shared MRV2 speculator set to one call's sizes: K (its ``draft_tokens`` buffer re-made at that
    width, as its constructor makes it) and ``max_model_len`` (vLLM 0.33 reads the model config's, 0.23 and
    0.27 keep a copy as an attribute, set at construction)."""
    tiny_config.refuse_past_limits(who, max_model_len)
    spec.vllm_config.model_config.max_model_len = max_model_len
    if "max_model_len" in vars(spec):
        spec.max_model_len = max_model_len
    if spec.num_speculative_steps != num_spec_tokens:
        spec.num_speculative_steps = num_spec_tokens
        spec.draft_tokens = torch.zeros(spec.max_num_reqs, num_spec_tokens, dtype=torch.int64, device=CPU)
        spec.draft_token_confidence_probs = torch.empty_like(spec.draft_tokens, dtype=torch.float32)
    return spec


def start_fresh(spec) -> None:
    """Zero the buffers a newly built speculator starts with: rows MRV2 reads before it writes them
    (divergence ``stale-rejected-rows``) would otherwise hold an earlier run's ids and positions."""
    for buffer in (spec.input_buffers.input_ids, spec.input_buffers.positions, spec.hidden_states):
        buffer.zero_()


def block_tables(block_table: torch.Tensor, block_size: int, max_num_tokens: int, kernel_block_size: int = 0):
    """vLLM's ``BlockTables`` holding ``block_table`` (batch order), one KV group: its staged table with batch row r
    at request-state row ``state_rows[r]`` (what the slot kernel reads through ``idx_mapping``), the input table
    (the batch's rows, as ``gather_block_tables`` copies them) as it is; a table of ``kernel_block_size``-token
    kernel blocks where given (a hybrid target's, ``kernel_table``)."""
    bt_module = import_vllm("vllm.v1.worker.gpu.block_table")
    table = block_table.to(torch.int32).contiguous().clone()
    staged = torch.empty_like(table)
    staged[state_rows(table.shape[0])] = table
    bt = object.__new__(bt_module.BlockTables)
    bt.block_sizes, bt.num_kv_cache_groups, bt.device = [block_size], 1, CPU
    kernel = kernel_block_size or block_size  # vLLM 0.23 / 0.27's layout reads these
    bt.kernel_block_sizes, bt.blocks_per_kv_block = [kernel], [block_size // kernel]
    bt.max_num_reqs, bt.max_num_batched_tokens = table.shape[0], max_num_tokens
    bt.cp_size, bt.cp_rank, bt.cp_interleave = 1, 0, 1
    bt._slot_mapping_enabled, bt._sliding_window_reach = [True], [0]
    bt.has_sliding_window_groups = False
    bt.dcp_sharded = torch.tensor([True])
    bt.block_tables = [SimpleNamespace(gpu=staged)]  # the staged tensor's device side, all it reads
    bt.input_block_tables = [table]  # what gather_block_tables would copy for this batch
    bt.slot_mappings = torch.zeros(1, max_num_tokens, dtype=torch.int64)
    bt.init_block_table_layout_tensors()
    kernel_bounds.reachable("block table of group 0 (through block_table_ptrs)", staged)
    return bt


def kernel_table(block_table: torch.Tensor, block_size: int, kernel_block_size: int) -> torch.Tensor:
    """``block_table`` (the scheduler's blocks, -1 past each row's) as an MRV2 runner's ``BlockTables`` holds it
    for a hybrid target whose blocks are split into ``kernel_block_size``-token kernel blocks: each row's blocks
    through vLLM's own ``append_block_ids`` (block i as kernel blocks i*m .. i*m + m-1), -1 past them. Its staged
    write lands in the table at once (plumbing: the staging is the runner's, its values vLLM's)."""
    m = block_size // kernel_block_size
    rows, width = block_table.shape
    out = torch.full((rows, width * m), -1, dtype=block_table.dtype, device=block_table.device)

    def stage_write(row: int, start: int, ids: list[int]) -> None:
        out[row, start : start + len(ids)] = torch.tensor(ids, dtype=out.dtype)

    holder = object.__new__(import_vllm("vllm.v1.worker.gpu.block_table").BlockTables)
    holder.num_kv_cache_groups, holder.blocks_per_kv_block = 1, [m]
    holder.num_blocks = SimpleNamespace(np=np.zeros((1, rows), dtype=np.int32))
    holder.block_tables = [SimpleNamespace(stage_write=stage_write)]
    for row, blocks in enumerate(block_table.tolist()):
        holder.append_block_ids(row, ([b for b in blocks if b >= 0],), overwrite=True)
    return out


def propose(
    spec, run: RunnerInputs, batch: VerifiedBatch, target, layers, is_profile: bool = True, **kwargs
) -> torch.Tensor:
    """``spec.propose`` as an MRV2 runner calls it after rejection sampling: the input batch, the target's
    attention metadata (``target``) and slots for each of the draft's ``layers`` (a name, or several), its hidden states, the sampler's counts,
    greedy drafting (temperature 0), eager dispatch unless ``is_profile`` is False (a full-graph speculator's
    captured graphs dispatched); ``kwargs``
    are what one generation's signature adds."""
    target_step = target_outputs(spec, batch, target, layers)
    zeros = torch.zeros(spec.max_num_reqs)
    return spec.propose(
        run.input_batch,
        target_step.attn_metadata,
        target_step.slot_mappings_by_layer,
        target_step.hidden_states,
        target_step.aux_hidden_states,
        run.num_sampled,
        run.num_rejected,
        run.last_sampled,
        run.next_prefill_tokens,
        zeros,
        zeros.to(torch.int64),
        is_profile=is_profile,
        **kwargs,
    )


def target_outputs(spec, batch: VerifiedBatch, target, layers) -> SimpleNamespace:
    """What the target's step leaves the runner for sampling and drafting (``execute_model``'s state, by its field
    names): the attention metadata ``target`` and the batch's slots for each of the draft's ``layers``, the target's
    hidden states; an eagle3 speculator's apart from its auxiliary layers', as the runner hands them
    (``vllm_model.target_layers``)."""
    t, names = batch.num_tokens, (layers,) if isinstance(layers, str) else tuple(layers)
    last, aux = target_layers(batch.hidden_states[:t].to(spec.dtype), getattr(spec, "method", "mtp") == "eagle3")
    return SimpleNamespace(
        attn_metadata=dict.fromkeys(names, target),
        slot_mappings_by_layer={name: batch.slot_mapping[:t].to(torch.int64).clone() for name in names},
        hidden_states=last,
        aux_hidden_states=aux,
    )
