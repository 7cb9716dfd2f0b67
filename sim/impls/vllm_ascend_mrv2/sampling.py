"""vllm-ascend's MRV2 runner samples the target's tokens itself: its ``sample_tokens``, from the logits to the drafts.

Under ``Scenario.runner_samples`` the speculator is not handed counts and tokens the harness made: the checkout's
``NPUModelRunner`` (worker/v2, built by its own constructor, ``runner_for``) runs vLLM's ``sample_tokens`` as it
inherits it. Its sampler (greedy) or rejection sampler (the drafts' rows and the bonus row) samples the target's
logits, as the call's verification decides them (``kit.verified_logits``), at the input batch's ``logits_indices``;
``get_num_sampled_and_rejected`` counts them against the request states' prompt lengths; the asynchronous output
copies the sampled tokens and counts to the host on its copy stream; vllm-ascend's ``postprocess_sampled`` books
them in the request states (``post_update``) and copies the device's counts to the host; the speculator drafts
from them; the drafts land in the request states' ``draft_tokens``, where the next step's input preparation takes
them from (``handoff`` prepares it from these request states, its new prompt arriving by ``arrive_new``). What the
call compares besides the drafts (``RunnerSampled``): the valid tokens the output reports to
the scheduler, and the tokens the request states hold for each request from its first scheduled position: MRV2
books the sampled tokens on the device, so under asynchronous scheduling too they are the tokens, not placeholders.

Requests arrive as the scheduler's new requests through the runner's own ``add_requests`` (its request states, its
sampler's states, its block tables), after the last call's requests finish (``finish_requests``); each is greedy,
as MRV2 drafts at a request's temperature (a random request's drafts are draws, not the reference's argmax; the
random path of its rejection sampler is ``rejection``'s). The target's step is the harness's: its hidden states
and attention metadata (``mrv2_runner.target_outputs``), the next prompt token of a request still in its prompt
(the request states' ``next_prefill_tokens``, which the step's input preparation writes), and its lm head, a
table from the step's hidden rows to their logits (``TargetHead``). Stood in: vLLM's UVA buffers, whose device
view of host memory is the host memory itself on the simulator (``kit.ascend.host_memory``).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch
from sim.impls.kit import mrv2_runner
from sim.impls.kit.ascend import early_copies, runner_source, world
from sim.impls.kit.ascend.host_memory import host_memory_as_uva, unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.in_place import in_place_of
from sim.impls.kit.verified_logits import TargetHead, logits_as_verified
from sim.impls.vllm_ascend_mrv2 import graphs
from sim.oracle.runner_samples import RunnerSampled

RUNNER = "vllm_ascend.worker.v2.model_runner"
MODEL_STATE_PATCH = "vllm_ascend/patch/worker/patch_v2/patch_model_state.py"  # the worker's init_model_state
UNKNOWN = -1  # a token before a request's first scheduled row: never known to the harness, never read


@functools.lru_cache(maxsize=8)
def runner_for(spec, num_spec_tokens: int, block_size: int, max_model_len: int):
    """The checkout's ``NPUModelRunner`` (worker/v2) beside the speculator ``spec``, drafting ``num_spec_tokens`` at
    ``max_model_len``: made by its own constructor as a worker makes it, with what its ``load_model`` and
    ``initialize_kv_cache`` would add that sampling reads (its model state: the worker's ``init_model_state``,
    vllm-ascend's patch run; its block tables: one KV-cache group of ``block_size``-token blocks), after a history
    that hands its free request-state rows from 0 up (``_rows_from_zero``). One per sizes, as a server has one."""
    config = spec.vllm_config
    module = import_ascend(RUNNER)
    set_config = import_ascend("vllm.config").set_current_vllm_config
    speculative, model = config.speculative_config, config.model_config
    own = speculative.num_speculative_tokens, model.max_model_len
    speculative.num_speculative_tokens, model.max_model_len = num_spec_tokens, max_model_len
    try:
        # its constructor's torch_cuda_wrapper as the harness applies it: its assignments, undone after the block
        wrapper = in_place_of(module, "torch_cuda_wrapper", graphs.cuda_as_npu)
        device = world.build_device()
        with wrapper, graphs.cuda_as_npu(), unpinned_host_memory(), host_memory_as_uva(), set_config(config):
            with world.recording(device):  # its buffers are the device's
                runner = module.NPUModelRunner(config, device)
                _model_state_patch()
                runner.model = None  # each call's lm head (``TargetHead``)
                _once_the_model_is_loaded()(runner)
                runner.block_tables = _block_tables(runner, block_size)
            _rows_from_zero(runner)
    finally:
        speculative.num_speculative_tokens, model.max_model_len = own
    return runner


@functools.cache
def _model_state_patch() -> None:
    """vllm-ascend's patch of vLLM's ``init_model_state``, run as its worker runs it (once per process)."""
    runner_source.run_checkout_module(MODEL_STATE_PATCH)


@functools.cache
def _once_the_model_is_loaded():
    """What vLLM's MRV2 ``load_model`` sets up once the model's weights are loaded, as a function of the runner: its
    model state (the worker's ``init_model_state``), and on vLLM 0.27 the samplers (0.23 makes them in the
    constructor). Those statements of its source, from the one that makes the model state up to the pooling runner's,
    compiled once with its module's names: the loading before them needs weights."""
    module = import_ascend("vllm.v1.worker.gpu.model_runner")
    func = ast.parse(textwrap.dedent(inspect.getsource(module.GPUModelRunner.load_model))).body[0]
    body = func.body
    start = next(i for i, st in enumerate(body) if "self.model_state =" in ast.unparse(st))
    end = next(i for i in range(start, len(body)) if "pooling_runner" in ast.unparse(body[i]))
    source = "def once_loaded(self):\n" + textwrap.indent("\n".join(ast.unparse(st) for st in body[start:end]), "    ")
    names = dict(vars(module))
    exec(compile(source, inspect.getsourcefile(module), "exec"), names)  # noqa: S102 - vLLM's own code
    return names["once_loaded"]


def _rows_from_zero(runner) -> None:
    """A history of as many requests as the runner has request-state rows (of no tokens: they only take a row),
    added and then finished from the last row down, through its own methods: its free rows are then handed out from
    0 up, and each call's requests, finished the same way (``finish``), leave them so."""
    output = import_ascend("vllm.v1.core.sched.output")
    earlier = [_request_data(f"earlier{i}", [], [], 0, [], 1) for i in range(runner.max_num_reqs)]
    runner.add_requests(dataclasses.replace(output.SchedulerOutput.make_empty(), scheduled_new_reqs=earlier))
    finish(runner)


def _request_data(req_id: str, prompt: list[int], tokens: list[int], computed: int, blocks: list[int], max_tokens: int):
    """vLLM's ``NewRequestData`` of a greedy request: its prompt, the tokens its runner's request state starts with
    (``prefill_token_ids``), those computed, its blocks; a field the generation requires that is not made here is a
    ``LookupError`` naming it."""
    output = import_ascend("vllm.v1.core.sched.output")
    params = import_ascend("vllm.sampling_params").SamplingParams(temperature=0.0, max_tokens=max_tokens)
    return mrv2_runner.made(
        output.NewRequestData, req_id=req_id, prompt_token_ids=list(prompt), mm_features=[], sampling_params=params,
        pooling_params=None, block_ids=(list(blocks),), num_computed_tokens=computed, lora_request=None,
        prefill_token_ids=list(tokens),
    )  # fmt: skip


def finish(runner) -> None:
    """Every request the runner holds finished (its own ``_remove_request``, as ``finish_requests`` calls it), from
    the last request-state row down."""
    held = runner.req_states.req_id_to_index
    for req_id in sorted(held, key=held.get, reverse=True):
        runner._remove_request(req_id)


def _block_tables(runner, block_size: int):
    """vLLM's ``BlockTables`` as the runner's ``initialize_kv_cache`` makes them for one KV-cache group."""
    blocks = -(-runner.max_model_len // block_size)
    return import_ascend("vllm.v1.worker.gpu.block_table").BlockTables(
        block_sizes=[block_size],
        max_num_reqs=runner.max_num_reqs,
        max_num_batched_tokens=runner.max_num_tokens,
        max_num_blocks_per_group=[blocks],
        device=runner.device,
        kernel_block_sizes=[block_size],
    )


def new_request(r: int, batch: VerifiedBatch, sampled: SampledTokens, max_tokens: int):
    """Request ``r`` as the scheduler hands it to the runner: its computed tokens (``UNKNOWN``: never read), then its
    scheduled rows that are not drafts; a chunk whose sample is discarded also the prompt token past it (the core's
    backup). A decode's last known token is its output, every other token its prompt's; its blocks the batch's
    table row."""
    qsl = np.asarray(batch.query_start_loc_cpu)
    seq_len, k = int(batch.seq_lens_cpu[r]), int(batch.num_draft_tokens_cpu[r])
    computed = seq_len - int(qsl[r + 1] - qsl[r])
    tokens = [UNKNOWN] * computed + batch.token_ids[int(qsl[r]) : int(qsl[r + 1]) - k].tolist()
    if sampled.discarded[r]:
        tokens.append(int(sampled.backup[r]))
    blocks = [int(b) for b in batch.block_table[r].tolist() if int(b) >= 0]
    return _request_data(f"r{r}", tokens[:-1] if k > 0 else tokens, tokens, computed, blocks, max_tokens)


def arrive(runner, batch: VerifiedBatch, sampled: SampledTokens, state: torch.Tensor) -> None:
    """The last call's requests finished (``finish``) and this call's arrived through the runner's own
    ``add_requests``, in the order that gives each the request-state row ``state`` says (the input batch's); a
    ``LookupError`` where the runner gives another."""
    output = import_ascend("vllm.v1.core.sched.output")
    finish(runner)
    order = sorted(range(batch.num_reqs), key=lambda r: int(state[r]))  # the free rows are handed from 0 up
    step = dataclasses.replace(
        output.SchedulerOutput.make_empty(),
        scheduled_new_reqs=[new_request(r, batch, sampled, runner.max_model_len) for r in order],
    )
    runner.add_requests(step)
    given = [runner.req_states.req_id_to_index[f"r{r}"] for r in range(batch.num_reqs)]
    if given != state.tolist():
        raise LookupError(f"the runner gave the requests state rows {given}, the input batch has {state.tolist()}")


def arrive_new(runner, req_id: str, prompt: list[int], row: int) -> None:
    """A new request of prompt ``prompt`` arrived for the next step (the scheduler's, through the runner's own
    ``add_requests``), in request-state row ``row``; a ``LookupError`` where the runner gives another."""
    output = import_ascend("vllm.v1.core.sched.output")
    new = _request_data(req_id, prompt, prompt, 0, [], runner.max_model_len)
    with unpinned_host_memory():
        runner.add_requests(dataclasses.replace(output.SchedulerOutput.make_empty(), scheduled_new_reqs=[new]))
    given = runner.req_states.req_id_to_index[req_id]
    if given != row:
        raise LookupError(f"the runner gave the new request state row {given}, the next step has it in {row}")


def prepare_prefill(runner, ib) -> None:
    """What the step's ``prepare_inputs`` writes of the request states that drafting reads: where a request is
    still in its prompt, its next prompt tokens (``next_prefill_tokens``), by vLLM's ``prepare_prefill_inputs`` as
    the runner calls it (the step's input ids, which it writes too, are the target's, not read here)."""
    states = runner.req_states
    prefilling = states.num_computed_prefill_tokens[ib.idx_mapping_np] < states.prefill_len.np[ib.idx_mapping_np]
    if np.any(prefilling):
        import_ascend("vllm.v1.worker.gpu.input_batch").prepare_prefill_inputs(
            runner.input_buffers.input_ids, states.next_prefill_tokens, ib.idx_mapping, ib.query_start_loc,
            states.all_token_ids.gpu, states.prefill_len.gpu, states.num_computed_tokens.gpu,
        )  # fmt: skip


def sample_and_propose(
    spec, run, batch: VerifiedBatch, sampled: SampledTokens, target, layers, vocab_size: int, device,
    asynchronous: bool,
):  # fmt: skip
    """(drafts [B, K] in batch order, ``RunnerSampled``, the runner): the runner's ``sample_tokens`` of the step that
    verified ``batch`` as ``sampled`` says, with the speculator ``spec`` (``run``: the call's
    ``mrv2_runner.RunnerInputs``, whose input batch the step's is; ``target``: the target's attention metadata)."""
    # one position past the speculator's max_model_len: a serving run's request may sample the token at that
    # position before it ends (the speculator's overflow there is under test), a step vLLM's scheduler would not make
    model_len = spec.vllm_config.model_config.max_model_len + 1
    runner = runner_for(spec, spec.num_speculative_steps, int(spec.block_tables.block_sizes[0]), model_len)
    # what the runner's constructor and an eager deployment's initialize_kv_cache give its speculator: main's update
    # stream, the graph managers (dispatching eagerly)
    if hasattr(runner, "update_stream") and not hasattr(spec, "update_stream"):
        spec.update_stream = runner.update_stream
    if getattr(spec, "decode_cudagraph_manager", None) is None:
        spec.init_cudagraph_manager(import_ascend("vllm.config").CUDAGraphMode.NONE)
    ib = run.input_batch
    states = runner.req_states
    checked = early_copies.checked(device, batch, sampled)
    with graphs.cuda_as_npu(), unpinned_host_memory(), host_memory_as_uva(), checked:
        arrive(runner, batch, sampled, ib.idx_mapping)
        prepare_prefill(runner, ib)
        outputs = mrv2_runner.target_outputs(spec, batch, target, layers)
        table = logits_as_verified(batch, sampled, vocab_size).to(spec.dtype)
        runner.model = TargetHead(outputs.hidden_states, table, ib.logits_indices)
        runner.speculator, runner.use_async_scheduling = spec, asynchronous
        state_cls = import_ascend("vllm.v1.worker.gpu.model_runner").ExecuteModelState
        runner.execute_model_state = state_cls(input_batch=ib, finished_req_ids=set(), **vars(outputs))
        output = runner.sample_tokens(None)
        if hasattr(output, "get_output"):  # the asynchronous output: its copy lands when the scheduler takes it
            output = output.get_output()
        torch.npu.current_stream().synchronize()  # the harness's host read of the drafts (the runner keeps them)
        drafts = states.draft_tokens[ib.idx_mapping].clone()
    index = output.req_id_to_index
    valid = [list(output.sampled_token_ids[index[f"r{r}"]]) for r in range(batch.num_reqs)]
    held = [_held(states, int(s), batch, r) for r, s in enumerate(ib.idx_mapping)]
    return drafts, RunnerSampled(valid, held), runner


def _held(states, row: int, batch: VerifiedBatch, r: int) -> list[int]:
    """The tokens the request states hold for request ``r`` (state row ``row``) from its first scheduled position."""
    computed = int(batch.seq_lens_cpu[r]) - int(batch.query_start_loc_cpu[r + 1] - batch.query_start_loc_cpu[r])
    total = int(states.total_len.gpu[row])
    return states.all_token_ids.gpu[row, computed:total].tolist()
