"""The runner's side of an iteration from the target's logits to the drafts: ``NPUModelRunner.sample_tokens``.

Under ``Scenario.runner_samples`` the drafter is not handed sampled tokens the harness made: the runner
samples them itself. ``sample_and_propose`` gives the runner what its ``execute_model`` leaves for
``sample_tokens`` (``execute_model_state``): the ``SpecDecodeMetadata`` of its own ``_calc_spec_decode_metadata``, the
target's logits at that metadata's ``logits_indices`` (``logits_as_verified``), the scheduler output, the
target's attention metadata, hidden states and batch descriptor as the hand-off derives them; and its
own input batch (``NPUInputBatch``, built by the expression its ``__init__`` builds it with) holding the
batch's requests (``CachedRequestState``: greedy, and random at temperature 1 for every other one, so a
batch of two mixes the sampler's two paths). ``sample_tokens`` then runs as the checkout has it:
``_sample`` through its ``AscendRejectionSampler`` (its greedy and random kernels in the interpreter, each
launch guarded), ``_bookkeeping_sync`` (the valid sampled tokens, the input batch's token ids and counts), the
drafter through ``propose_draft_token_ids`` with the sampler's tokens (padded) or the bookkeeping's lists
(unpadded), and the drafts' copy to the host on its copy stream, which ``take_draft_token_ids`` reads.

``RunnerSampled`` is what the gate compares with the reference's verification (``sim.oracle.runner_samples``):
the valid sampled tokens of each request as the runner reports them to the scheduler, and the tokens its
input batch holds for the request after the step.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend import runner_source
from sim.impls.kit.ascend.host_memory import unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.verified_logits import logits_as_verified
from sim.impls.vllm_ascend import handoff, torch_cuda
from sim.oracle.runner_samples import RunnerSampled

PLATFORM_PATCH = "vllm_ascend/patch/platform/patch_pp_mtp.py"
SAMPLER_PATCH = "vllm_ascend/patch/worker/patch_rejection_sampler.py"
UNKNOWN = -1  # a token before a request's first scheduled row: never known to the harness, never read
RANDOM = 2  # request r samples at temperature 1 where r % RANDOM == 1, greedily elsewhere


def _request(r: int, batch: VerifiedBatch, sampled: SampledTokens):
    """Request ``r`` as the runner holds it before sampling (vLLM's ``CachedRequestState``, greedy or
    at temperature 1 as ``RANDOM`` says, drawing from torch's default generator): its
    tokens up to its first scheduled row unknown (``UNKNOWN``), then its scheduled rows that are not drafts;
    a chunk whose sample is discarded also the tokens past it, each the request's own token at its seq_len
    (the backup: the harness's runner state, ``vllm_types.to_step_one_inputs``). A decode's last known
    token is its output, a prefill's tokens its prompt."""
    qsl = np.asarray(batch.query_start_loc_cpu)
    seq_len, query, k = int(batch.seq_lens_cpu[r]), int(qsl[r + 1] - qsl[r]), int(batch.num_draft_tokens_cpu[r])
    computed = seq_len - query
    rows = batch.token_ids[int(qsl[r]) : int(qsl[r + 1]) - k].tolist()
    prompt, output = [UNKNOWN] * computed + rows, []
    if sampled.discarded[r]:
        prompt.append(int(sampled.backup[r]))
    elif k > 0:
        prompt, output = prompt[:-1], prompt[-1:]
    state = import_ascend("vllm.v1.worker.gpu_input_batch").CachedRequestState
    params = import_ascend("vllm.sampling_params").SamplingParams(temperature=float(r % RANDOM == 1))
    return state(
        req_id=f"r{r}",
        prompt_token_ids=prompt,
        mm_features=[],
        sampling_params=params,
        generator=None,
        block_ids=([],),  # its blocks are the hand-off's (``input_batch``)
        num_computed_tokens=computed,
        output_token_ids=output,
    )


def _runner_state(runner, num_spec_tokens: int) -> None:
    """What ``sample_tokens`` reads of the runner besides, as its ``__init__`` sets it: its sampler and
    rejection sampler (its own expressions), vLLM's scratch ranges, events and streams, made once per
    runner view; and the drafts' host buffer of this call's draft count (one view serves every K)."""
    runner.num_spec_tokens = num_spec_tokens
    if getattr(runner, "draft_token_ids_cpu", None) is None or runner.draft_token_ids_cpu.shape[1] != num_spec_tokens:
        runner.draft_token_ids_cpu = torch.empty((runner.max_num_reqs, num_spec_tokens), dtype=torch.int64)
    if getattr(runner, "rejection_sampler", None) is not None:
        return
    platform_patch_of_the_runner_output()
    runner.async_output_copy_stream = torch.npu.Stream()
    size = max(runner.max_num_tokens, runner.max_num_reqs + 1)
    if getattr(runner, "arange_np", None) is None:  # a full-graph view has its own
        runner.arange_np = np.arange(size, dtype=np.int64)
    runner._arange_scratch = np.empty(size, dtype=np.int64)
    runner.draft_token_ids_event = torch.npu.Event()
    runner.draft_token_ids_copy_stream = torch.npu.Stream()
    runner.transfer_event = torch.npu.Event()
    runner.sampled_token_ids_pinned_cpu = runner_source.init_value("sampled_token_ids_pinned_cpu")(runner)
    runner.sampler = runner_source.init_value("sampler")(runner)
    # v0.18.0's runner builds vLLM's RejectionSampler, whose module functions the worker's patch replaces
    # with vllm-ascend's (adapt_patch); that patch alone, as its own module (the package imports every other)
    runner_source.run_checkout_module(SAMPLER_PATCH)
    runner.rejection_sampler = runner_source.init_value("rejection_sampler", "_set_up_drafter")(runner)


def platform_patch_of_the_runner_output() -> None:
    """The checkout's platform patch of vLLM's ``ModelRunnerOutput`` (``patch_pp_mtp.py``'s
    ``_patch_model_runner_output``: the ``spec_token_ids`` main's ``sample_tokens`` builds its output
    with), run as vllm-ascend's plugin runs its platform patches in every process. That function alone,
    compiled from the checkout's source: the package's other platform patches import modules outside
    this env's closure (its tool parsers). None where the checkout has no such patch."""
    patch = runner_source.checkout_function(PLATFORM_PATCH, "_patch_model_runner_output", wraps=functools.wraps)
    if patch is not None:
        patch()


def input_batch(runner, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int):
    """The runner's own input batch holding ``batch``'s requests in its rows, and their states by id.
    It holds one position past ``max_model_len``: a serving run's request may sample the token at that
    position before it ends (the proposer's overflow at ``max_model_len`` is under test), a step vLLM's
    scheduler would not make. Its block tables are the view's where the view has some (a full-graph runner's persistent ones,
    which its captures read); elsewhere empty: the sampling half reads none, and the drafter is handed
    the batch's table by the hand-off (``handoff.arguments``)."""
    config = runner.model_config
    config.max_model_len += 1
    try:
        own = runner_source.init_value("input_batch")(runner)
    finally:
        config.max_model_len -= 1
    own.vocab_size = vocab_size  # the scenario's vocabulary (the tiny config's is the model's largest id)
    requests = {}
    for r in range(batch.num_reqs):
        state = _request(r, batch, sampled)
        own.add_request(state)
        requests[state.req_id] = state
    own.refresh_metadata()
    own.block_table = getattr(runner.input_batch, "block_table", own.block_table)
    return own, requests


def spec_decode_metadata(runner, batch: VerifiedBatch):
    """The runner's own ``_calc_spec_decode_metadata`` of the batch's draft counts (None: no drafts)."""
    drafts = np.asarray(batch.num_draft_tokens_cpu, dtype=np.int32)
    if not drafts.any():
        return None
    cu = np.asarray(batch.query_start_loc_cpu[1:], dtype=np.int32)
    takes = inspect.signature(runner_source.runner_method("_calc_spec_decode_metadata")).parameters
    extra = {"num_pcp_pads": None} if "num_pcp_pads" in takes else {}  # 0.23.0's: PCP's padding (none)
    return runner._calc_spec_decode_metadata(drafts, cu, **extra)


def _execute_model_state(**values):
    """The runner module's ``ExecuteModelState`` (its fields as its source names them) of ``values``."""
    fields = runner_source.named_tuple_fields("ExecuteModelState")
    missing = [f for f in fields if f not in values]
    if missing:
        raise LookupError(f"ExecuteModelState: fields {missing} not made by the harness ({runner_source._source()})")
    return collections.namedtuple("ExecuteModelState", fields)(**{f: values[f] for f in fields})


@contextlib.contextmanager
def _own_batch(runner, own, requests):
    """The runner's input batch and request states for one step, and the bound its bookkeeping checks
    its writes against (``max_model_len``: the batch's rows, one position past the model's); the view's
    own back after it, with what the step left its next one there, ``prev_sampled_token_ids``, which
    ``handoff.handed_on`` reads."""
    before = runner.input_batch, runner.requests, runner.max_model_len
    runner.input_batch, runner.requests, runner.max_model_len = own, requests, own.max_model_len
    try:
        yield
    finally:
        runner.input_batch, runner.requests, runner.max_model_len = before
        if getattr(own, "prev_sampled_token_ids", None) is not None:
            runner.input_batch.prev_sampled_token_ids = own.prev_sampled_token_ids


def sample_and_propose(
    runner, batch: VerifiedBatch, sampled: SampledTokens, num_spec_tokens: int, vocab_size: int, tolerated=()
):
    """(drafts, ``RunnerSampled``): ``sample_tokens`` of the step that verified ``batch`` as ``sampled`` says, and
    the drafts the runner hands the scheduler (``take_draft_token_ids``) in the batch's request order.
    ``tolerated``: a known defect's kernel accesses (``kernel_bounds.Access``), let through as named."""
    _runner_state(runner, num_spec_tokens)
    handoff.load(runner, batch, sampled, vocab_size)
    own, requests = input_batch(runner, batch, sampled, vocab_size)
    args = handoff.arguments(runner, batch, sampled, num_spec_tokens, handoff.target_step(runner, batch))
    with _own_batch(runner, own, requests), handoff.padded_drafter(runner, sampled.is_padded), unpinned_host_memory():
        spec = spec_decode_metadata(runner, batch)
        table = logits_as_verified(batch, sampled, vocab_size)
        rows = spec.logits_indices if spec is not None else batch.query_start_loc[1:].to(torch.int64) - 1
        runner.execute_model_state = _execute_model_state(
            scheduler_output=args["scheduler_output"],
            logits=table[rows],
            spec_decode_metadata=spec,
            spec_decode_common_attn_metadata=args["spec_decode_common_attn_metadata"],
            hidden_states=args["hidden_states"],
            sample_hidden_states=None,
            aux_hidden_states=args["aux_hidden_states"],
            attn_metadata=None,
            positions=args["positions"],
            ec_connector_output=None,
            cudagraph_stats=None,
            batch_desc=args["target_model_batch_desc"],
        )
        with kernel_bounds.tolerating(*tolerated), torch_cuda.as_the_runner_left_it():
            output = runner.sample_tokens(None)
        held = [_held(own, r, batch) for r in range(batch.num_reqs)]
        if runner.use_async_scheduling:  # the next step takes the drafts on the device; the output comes later
            drafts = runner._draft_token_ids[: batch.num_reqs]
            output = output.get_output()
        else:
            drafts = _as_handed(runner.take_draft_token_ids(), batch.num_reqs)
    valid = [list(output.sampled_token_ids[output.req_id_to_index[f"r{r}"]]) for r in range(batch.num_reqs)]
    return drafts, RunnerSampled(valid, held)


def _as_handed(handed, num_reqs: int) -> torch.Tensor:
    """The drafts ``take_draft_token_ids`` hands the scheduler, in the batch's request order."""
    by_id = dict(zip(handed.req_ids, handed.draft_token_ids))
    return torch.tensor([by_id[f"r{r}"] for r in range(num_reqs)], dtype=torch.int64)


def _held(own, r: int, batch: VerifiedBatch) -> list[int]:
    computed = int(batch.seq_lens_cpu[r]) - int(batch.query_start_loc_cpu[r + 1] - batch.query_start_loc_cpu[r])
    index = own.req_id_to_index[f"r{r}"]
    return own.token_ids_cpu[index, computed : own.num_tokens_no_spec[index]].tolist()
