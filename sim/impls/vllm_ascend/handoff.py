"""The runner's hand-off to its drafter: ``NPUModelRunner.propose_draft_token_ids``, as the runner calls it.

vllm-ascend's model runner drafts by calling its own ``propose_draft_token_ids`` (compiled from
source, ``runner_source``) after the target's forward and sampling; that method runs step 1
(``prepare_next_token_ids_padded`` / ``prepare_next_token_ids_cpu``), steps 2-3
(``prepare_inputs_padded`` / ``prepare_inputs``), gathers the target's token ids, positions
(``_get_positions``) and hidden states, and calls the drafter's ``_propose``; the target's batch
descriptor it hands on is the runner's own decision (``target_step``). ``load`` puts one
verified batch into the runner view's buffers as the runner holds them before that call (input
ids, positions, request states, input batch, discarded requests, and the attention state its input
preparation derives with its own ``_build_attn_state``: ``PrefillNoCache`` for a batch of new
prompts, ``SpecDecoding`` for one of decodes, ``ChunkedPrefill`` for a mix); ``arguments`` derives the
method's arguments as the runner's ``execute_model`` does: the ``SpecDecodeMetadata`` of the
verified drafts (None when no request verified any: the runner's ``use_spec_decode`` is False),
the target's ``AscendCommonAttentionMetadata`` (with that state, as ``_build_attention_metadata`` hands
it on for the target's step: a step padded to a FULL graph's size through the checkout's ``unpadded``,
``as_built_for_the_target``), the sampled tokens (the padded tensor, or the
per-request lists), vLLM's ``SchedulerOutput`` with each request's scheduled tokens, the hidden
states (eagle3: and the auxiliary layers', ``target_hidden_states``). ``padded_drafter`` sets the
runner's ``disable_padded_drafter_batch`` for one call.

Under asynchronous scheduling (``scheduling``) the runner's own ``_copy_valid_sampled_token_count``
copies the valid counts to the host on its copy stream, as its ``__init__`` sets it up; ``handed_on``
then runs the next step's side of it (``_compute_prev_positions``, ``_correct_optimistic_seq_lens_cpu``)
and reads what the runner handed over, for the checker (``sim.oracle.next_step``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import NamedTuple

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from sim.impls.kit import steps
from sim.impls.kit.ascend import interop
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.tiny_config import MAX_REQS
from sim.impls.kit.vllm_model import target_layers
from sim.impls.kit.vllm_types import GREEDY
from sim.impls.vllm_ascend import branch_divergences, crashes, generation, torch_cuda
from sim.oracle import next_step
from sim.oracle.next_step import NextStep


def load(runner, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> None:
    """The runner's state for ``batch`` before it drafts: ``input_ids`` and ``positions`` hold the
    scheduled tokens, ``requests`` and ``input_batch`` the request states, the discarded requests'
    indices their buffer (copied to the device as the runner copies them), ``attn_state`` the batch's
    (``_build_attn_state`` of each request's computed, scheduled and valid tokens, as
    ``_prepare_inputs`` calls it: the scheduled drafts are not valid tokens)."""
    n = batch.num_tokens
    positions = runner.target_positions
    if n > positions.shape[0]:
        raise ValueError(f"batch.num_tokens={n}: the runner's buffers hold {positions.shape[0]}")
    runner.input_ids.gpu[:n] = batch.token_ids[:n].to(runner.input_ids.gpu.dtype)
    positions[:n] = batch.positions[:n].to(positions.dtype)
    step_one = interop.to_step_one_inputs(batch, sampled, vocab_size)
    runner.requests = step_one.requests
    view = step_one.input_batch
    runner.input_batch.req_ids = view.req_ids
    runner.input_batch.num_tokens_no_spec = view.num_tokens_no_spec
    runner.input_batch.vocab_size = view.vocab_size
    runner.input_batch.num_reqs = view.num_reqs
    idx, count = interop.discard_indices(sampled, torch.device("cpu"))
    runner.discard_request_indices.np[:count] = idx.numpy()
    runner.discard_request_indices.copy_to_gpu(count)
    runner.num_discarded_requests = count
    scheduled = np.asarray(batch.query_lens_cpu, dtype=np.int32)
    computed = np.asarray(batch.seq_lens_cpu, dtype=np.int32) - scheduled
    # into the runner's arrays (the first a tensor's view), as long as its batch's: a dummy run reads them at its
    # padded count, past the call's requests
    runner.input_batch.num_computed_tokens_cpu[: batch.num_reqs] = computed
    runner.input_batch.num_prompt_tokens[: batch.num_reqs] = prompt_tokens(batch, sampled, computed)
    valid = scheduled - np.asarray(batch.num_draft_tokens_cpu, dtype=np.int32)
    runner._build_attn_state(batch.num_reqs, scheduled, valid)


def prompt_tokens(batch: VerifiedBatch, sampled: SampledTokens, computed: np.ndarray) -> np.ndarray:
    """Each request's prompt length as the runner's reads of it decide (v0.24.0rc's
    ``_determine_batch_execution_and_padding``: a decode graph only once every prompt is computed,
    ``num_computed_tokens_cpu >= num_prompt_tokens``): a request that verifies drafts is past its prompt
    (its count before the step); a prefill's prompt ends with the step (its ``seq_len``: a one-token
    query at a PD handoff is the prompt's last token), or goes on past it where the step's sample is
    discarded (a chunk of a longer prompt)."""
    seq_lens = np.asarray(batch.seq_lens_cpu, dtype=np.int32)
    drafts = np.asarray(batch.num_draft_tokens_cpu) > 0
    return np.where(drafts, computed, seq_lens + np.asarray(sampled.discarded, dtype=np.int32))


def scheduler_output(batch: VerifiedBatch, num_spec_tokens: int):
    """vLLM's ``SchedulerOutput`` of the step: each request's scheduled tokens, the drafts of the
    requests that verify some (vLLM's scheduler lists only those), and this generation's draft count."""
    output = import_ascend("vllm.v1.core.sched.output").SchedulerOutput
    req_ids = [f"r{r}" for r in range(batch.num_reqs)]
    qsl = np.asarray(batch.query_start_loc_cpu)
    ids = batch.token_ids.tolist()
    drafts = {
        rid: ids[qsl[r] + 1 : qsl[r] + 1 + int(k)]
        for r, (rid, k) in enumerate(zip(req_ids, batch.num_draft_tokens_cpu))
        if int(k) > 0
    }
    return dataclasses.replace(
        output.make_empty(),
        num_scheduled_tokens={rid: int(q) for rid, q in zip(req_ids, batch.query_lens_cpu)},
        total_num_scheduled_tokens=batch.num_tokens,
        scheduled_spec_decode_tokens=drafts,
        **generation.scheduled_draft_count(output, num_spec_tokens),
    )


def arguments(runner, batch: VerifiedBatch, sampled: SampledTokens, num_spec_tokens: int, target: TargetStep) -> dict:
    """``propose_draft_token_ids``'s arguments for ``batch`` after the target's step ``target``, as
    ``execute_model`` derives them."""
    spec = interop.to_spec_decode_metadata(batch) if int(np.sum(batch.num_draft_tokens_cpu)) > 0 else None
    n = batch.num_tokens
    cad = generation.runner_metadata(batch)
    cad.attn_state = runner.attn_state  # as the runner's _build_attention_metadata hands it
    cad = as_built_for_the_target(runner, cad, target)
    return dict(
        valid_sampled_token_ids=sampled.padded if sampled.is_padded else steps.unpadded_lists(sampled),
        sampling_metadata=GREEDY,
        scheduler_output=scheduler_output(batch, num_spec_tokens),
        spec_decode_metadata=spec,
        spec_decode_common_attn_metadata=cad,
        positions=runner.target_positions[:n],
        num_scheduled_tokens=n,
        **target_hidden_states(runner, batch.hidden_states[:n].to(torch.float32)),
        sample_hidden_states=None,
        target_model_batch_desc=target.desc,
    )


def as_built_for_the_target(runner, cad, target: TargetStep):
    """The metadata the runner's ``_build_attention_metadata`` hands its drafter after the target's
    step, with the runner's block table and (``as_handed_asynchronously``) its host fields. A step the
    runner pads (a FULL graph's size, or the largest DP rank's tokens: ``padded_sizes``) has its
    metadata built at the padded sizes (the padded requests' block-table rows 0 and lengths 0, the padded tokens' slots
    -1), and the drafter is handed the checkout's own ``unpadded(num_tokens, num_reqs)`` of it, which
    keeps the padded block table, slot mapping and token count. Every other step is built at its size."""
    cad = as_handed_asynchronously(runner, cad)
    b, n = cad.num_reqs, cad.num_actual_tokens
    b_pad, n_pad = padded_sizes(runner, cad, target)
    if (b_pad, n_pad) == (b, n):
        cad.block_table_tensor = runner.block_table_view(cad.block_table_tensor)
        return cad
    if target.mode == _full():  # the offsets the runner's _pad_query_start_loc_for_fia padded in its buffer
        offsets, offsets_cpu = runner.query_start_loc.gpu[: b_pad + 1], runner.query_start_loc.cpu[: b_pad + 1]
    else:  # requests past the batch (none unless the descriptor names more) end where it ends
        last = int(cad.query_start_loc_cpu[b])
        offsets, offsets_cpu = (_padded(q, b_pad + 1, last) for q in (cad.query_start_loc, cad.query_start_loc_cpu))
    init = {f.name for f in dataclasses.fields(cad) if f.init}
    fields = {name: getattr(cad, name) for name in PER_REQUEST if name in init and getattr(cad, name) is not None}
    padded_once = {id(v): _padded(v, b_pad, 0) for v in fields.values()}  # one tensor under several names stays one
    per_request = {name: padded_once[id(v)] for name, v in fields.items()}
    padded = dataclasses.replace(
        cad,
        query_start_loc=offsets,
        query_start_loc_cpu=offsets_cpu,
        num_reqs=b_pad,
        num_input_tokens=n_pad,
        block_table_tensor=runner.block_table_view(cad.block_table_tensor, b_pad),
        slot_mapping=_padded(cad.slot_mapping, n_pad, -1),
        **per_request,
    )
    return padded.unpadded(n, b)


def _full():
    return import_ascend("vllm.config").CUDAGraphMode.FULL


def as_handed_asynchronously(runner, cad):
    """``cad`` as a runner with optimistic host lengths (``generation.runner_hands_optimistic_host_lengths``)
    hands it under asynchronous spec decoding: without ``seq_lens_cpu`` and ``num_computed_tokens_cpu``
    (the device's are authoritative; ``_seq_lens_cpu`` stays). Else ``cad``."""
    if not (getattr(runner, "use_async_spec_decode", False) and generation.runner_hands_optimistic_host_lengths()):
        return cad
    return dataclasses.replace(cad, seq_lens_cpu=None, num_computed_tokens_cpu=None)


def padded_sizes(runner, cad, target: TargetStep) -> tuple[int, int]:
    """(requests, tokens) the runner builds the target step's metadata at: the descriptor's tokens (a
    FULL graph's size, or on DP ranks the largest rank's) and requests (the batch's where it names
    none); under a FULL graph the requests its own ``_pad_query_start_loc_for_fia`` pads the query
    offsets to, in its ``query_start_loc`` (the phantom requests of a uniform decode, or one dummy
    request for the tokens past the batch)."""
    b, desc = cad.num_reqs, target.desc
    requests = desc.num_reqs or b
    if target.mode == _full():
        offsets = runner.query_start_loc
        offsets.np[: b + 1] = cad.query_start_loc_cpu.numpy()
        offsets.copy_to_gpu()
        requests = generation.pad_query_start_loc_for_fia(
            runner, desc.num_tokens, requests, b, target.mode, desc.num_reqs
        )
    return requests, desc.num_tokens


# The metadata's per-request fields, as a padded step's has them: the padded requests' lengths and counts 0
# (the runner's buffers past its requests), and not prefilling.
PER_REQUEST = (
    "seq_lens",
    "seq_lens_cpu",
    "_seq_lens_cpu",
    "seq_lens_cpu_upper_bound",
    "num_computed_tokens_cpu",
    "is_prefilling",
)


def _padded(values: torch.Tensor, size: int, fill) -> torch.Tensor:
    """``values`` followed by ``fill`` up to ``size`` entries."""
    out = values.new_full((size, *values.shape[1:]), fill)
    out[: values.shape[0]] = values
    return out


def target_hidden_states(runner, hidden: torch.Tensor) -> dict:
    """The target's hidden states as its forward returns them to the runner (``vllm_model.target_layers``),
    the auxiliary layers where the drafter takes them (eagle3: ``use_aux_hidden_state_outputs``)."""
    last, aux = target_layers(hidden, runner.use_aux_hidden_state_outputs)
    return {"hidden_states": last, "aux_hidden_states": aux}


@contextlib.contextmanager
def padded_drafter(runner, padded: bool):
    """The runner's speculative config with ``disable_padded_drafter_batch = not padded`` for one call
    (the drafter reads it only when built)."""
    spec = runner.vllm_config.speculative_config
    before = spec.disable_padded_drafter_batch
    spec.disable_padded_drafter_batch = not padded
    try:
        yield
    finally:
        spec.disable_padded_drafter_batch = before


class Drafter:
    """The runner's ``drafter``: the proposer, each ``_propose`` call's hand-off (its keyword
    arguments) kept in ``handed`` and shown to ``on_handoff`` first (the adapter's recording model
    learns the first pass's sample rows from it)."""

    def __init__(self, proposer, on_handoff=None):
        self.proposer, self.on_handoff, self.handed = proposer, on_handoff, None

    def __getattr__(self, name):
        return getattr(self.proposer, name)

    def _propose(self, **kwargs):
        self.handed = kwargs
        if self.on_handoff is not None:
            self.on_handoff(kwargs)
        if crashes.sidestepped(branch_divergences.PADDING_STALE_INDICES.id):
            self.proposer.token_indices_to_sample.fill_(0)  # crashes.SIDESTEPS
        return self.proposer._propose(**kwargs)


def sample_rows(handed: dict) -> torch.Tensor:
    """The first pass's sample rows ``_propose`` uses: those handed, else each request's last row."""
    rows = handed["token_indices_to_sample"]
    return (handed["common_attn_metadata"].query_start_loc[1:] - 1 if rows is None else rows).to(torch.int64)


class TargetStep(NamedTuple):
    """How the runner ran the target's step: its graph mode and batch descriptor."""

    mode: object  # vLLM's CUDAGraphMode
    desc: object  # vLLM's BatchDescriptor


def target_step(runner, batch: VerifiedBatch) -> TargetStep:
    """The target's step as ``execute_model`` decides it, by the runner's own
    ``_determine_batch_execution_and_padding``: its dispatcher's graph mode and padding (an eager
    runner: none) and, on data-parallel ranks, the sync of both with the other ranks."""
    lens = np.asarray(batch.query_lens_cpu, dtype=np.int32)
    mode, desc, *_ = runner._determine_batch_execution_and_padding(
        num_tokens=batch.num_tokens,
        num_reqs=batch.num_reqs,
        num_scheduled_tokens_np=lens,
        max_num_scheduled_tokens=int(lens.max()),
        use_cascade_attn=False,
        force_eager=not runner._use_aclgraph(),
    )
    return TargetStep(mode, desc)


def propose(runner, batch: VerifiedBatch, sampled: SampledTokens, num_spec_tokens: int, vocab_size: int):
    """The drafts of one call through the runner's own ``propose_draft_token_ids``, after the target's
    step (``target_step``) as the runner runs it."""
    load(runner, batch, sampled, vocab_size)
    args = arguments(runner, batch, sampled, num_spec_tokens, target_step(runner, batch))
    with padded_drafter(runner, sampled.is_padded), torch_cuda.as_the_runner_left_it():
        return runner.propose_draft_token_ids(**args)


@contextlib.contextmanager
def scheduling(runner, asynchronous: bool):
    """The runner's scheduling for one call: synchronous (no valid-count event: its
    ``_copy_valid_sampled_token_count`` returns at once), or asynchronous, with what its ``__init__``
    makes for it (made once per runner view): the event, the copy stream, the host counts (int64, as
    vllm-ascend re-makes them), and vLLM's buffers of the previous step's rows and draft counts."""
    if not asynchronous:
        yield
        return
    if getattr(runner, "valid_sampled_token_count_copy_stream", None) is None:
        runner.valid_sampled_token_count_copy_stream = torch.npu.Stream()
        runner.valid_sampled_token_count_cpu = torch.empty(MAX_REQS, dtype=torch.int64)
        runner.optimistic_seq_lens_cpu = torch.zeros(MAX_REQS, dtype=torch.int32)
        runner.prev_num_draft_tokens = runner._make_buffer(MAX_REQS, dtype=torch.int32)
        runner.prev_positions = runner._make_buffer(MAX_REQS, dtype=torch.int64)
    runner.use_async_scheduling = runner.use_async_spec_decode = True
    runner.valid_sampled_token_count_event = torch.npu.Event()
    try:
        yield
    finally:
        runner.use_async_scheduling = runner.use_async_spec_decode = False
        runner.valid_sampled_token_count_event = None


def handed_on(runner, batch: VerifiedBatch, drafts: torch.Tensor) -> NextStep:
    """What the runner handed its next step after an asynchronous call, per request of ``batch``.

    The next step is ``next_step.next_rows``: ``batch``'s requests in reverse order (a condensed
    batch: each request in another row), each a decode of its K drafts, with a new request's prompt
    among them, scheduled and counted ahead as vLLM's scheduler does it under async scheduling (every
    draft of this step accepted; the tokens not known yet placeholders: -1 on the host, and no token
    in the device buffer). The runner's own ``_compute_prev_positions`` (vLLM's) maps its rows to this
    step's; ``_prepare_input_ids`` (vLLM's, which the runner inherits) puts the sampled token and this
    step's ``drafts`` (as ``sample_tokens`` keeps them, ``_draft_token_ids``) in their rows;
    ``_correct_optimistic_seq_lens_cpu`` corrects the lengths by the counts its copy stream brought to
    the host (after its event), and the device its ``num_computed_tokens`` and ``num_accepted_tokens``
    by the counts it kept (``_corrected_on_the_device``). Read back per request of this step: the input
    ids, the corrected lengths less the query, the host counts, the device's corrected counts and
    ``prev_sampled_token_ids``; and the new request's row."""
    b, k = batch.num_reqs, drafts.shape[1]
    order = next_step.next_rows(b)  # this step's row of each next row, None: the new request
    n, new = len(order), order.index(None)
    queries = np.array([len(next_step.NEW_PROMPT) if i is None else 1 + k for i in order], dtype=np.int32)
    ends = np.cumsum(queries, dtype=np.int32)
    rows = runner.input_batch
    req_ids = list(rows.req_ids[:b])
    rows.prev_req_id_to_index = {rid: i for i, rid in enumerate(req_ids)}
    rows.req_ids = ["new" if i is None else req_ids[i] for i in order]
    runner._compute_prev_positions(n)
    # as the runner keeps the drafts (vLLM 0.27 also their width, ``prev_num_spec_tokens``)
    runner.num_spec_tokens = runner.prev_num_spec_tokens = k
    runner._draft_token_ids = drafts
    total = int(ends[-1])
    runner.input_ids.cpu[:total] = -1  # the scheduler's placeholders, and the new prompt's tokens
    runner.input_ids.cpu[ends[new] - queries[new] : ends[new]] = torch.tensor(next_step.NEW_PROMPT)
    runner.input_ids.gpu[:total] = -1
    scheduled = dataclasses.replace(
        import_ascend("vllm.v1.core.sched.output").SchedulerOutput.make_empty(),
        scheduled_spec_decode_tokens={rid: [-1] * k for rid in req_ids},
    )
    runner._prepare_input_ids(scheduled, n, total, ends)
    runner.prev_num_draft_tokens.np[:b] = np.asarray(batch.num_draft_tokens_cpu, dtype=np.int32)
    seq_lens = np.asarray(batch.seq_lens_cpu, dtype=np.int32)
    computed_ahead = np.array([0 if i is None else seq_lens[i] for i in order], dtype=np.int32)
    runner.optimistic_seq_lens_cpu[:n] = torch.from_numpy(computed_ahead + queries)
    num_computed, num_accepted = _corrected_on_the_device(runner, batch, n, torch.from_numpy(computed_ahead))
    generation.correct_host_seq_lens(runner, n, num_computed, queries)
    ids = runner.input_ids.gpu[:total]
    row_ids = [ids[end - q : end] for end, q in zip(ends, queries)]  # the input ids of each next row
    by_request = [order.index(i) for i in range(b)]  # each request's next row
    corrected = runner.optimistic_seq_lens_cpu[:n] - torch.from_numpy(queries)
    new_state = (runner.optimistic_seq_lens_cpu[new], num_computed[new], num_accepted[new])
    return NextStep(
        next_tokens=rows.prev_sampled_token_ids[:b, 0].clone(),
        valid_counts=runner.valid_sampled_token_count_cpu[:b].clone(),
        seq_lens=corrected[by_request],
        input_ids=torch.stack([row_ids[j] for j in by_request]),
        num_computed=num_computed[by_request],
        num_accepted=num_accepted[by_request],
        new_request=torch.tensor([*row_ids[new].tolist(), *(int(v) for v in new_state)]),
    )


def _corrected_on_the_device(runner, batch: VerifiedBatch, n: int, computed_ahead: torch.Tensor):
    """The next step's ``num_computed_tokens`` and ``num_accepted_tokens`` (its ``n`` rows), as its
    ``_prepare_inputs`` corrects them on the device: the checkout's
    ``update_num_computed_tokens_for_batch_change`` on this step's ``num_computed_tokens``, the counts
    the runner kept on the device (``valid_sampled_token_count_gpu``), the rows' mapping and this
    step's draft counts, with the accepted counts first filled with 1 and the host's counted-ahead
    ``computed_ahead`` for the rows it does not correct."""
    b, device = batch.num_reqs, runner.device
    computed = np.asarray(batch.seq_lens_cpu, dtype=np.int32) - np.asarray(batch.query_lens_cpu, dtype=np.int32)
    num_computed = torch.zeros(MAX_REQS, dtype=torch.int32, device=device)
    num_computed[:b] = torch.from_numpy(computed).to(device)
    num_accepted = torch.ones(n, dtype=torch.int32, device=device)
    runner.prev_positions.copy_to_gpu(n)
    runner.prev_num_draft_tokens.copy_to_gpu()
    import_ascend("vllm_ascend.spec_decode.utils").update_num_computed_tokens_for_batch_change(
        num_computed,
        num_accepted,
        runner.prev_positions.gpu[:n],
        runner.valid_sampled_token_count_gpu,
        runner.prev_num_draft_tokens.gpu,
        computed_ahead.to(device, non_blocking=True),
    )
    return num_computed[:n], num_accepted
