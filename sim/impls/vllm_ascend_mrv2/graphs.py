"""vllm-ascend's MRV2 full-graph drafting, driven as its runner drives it: the decode steps' merged graph.

Under FULL_DECODE_ONLY the MRV2 runner captures the speculator's graphs after its own
(``capture_model`` -> ``speculator.capture``). On main every draft step 2..K is one graph
(``_multi_step_decode``, vllm-ascend #11461), captured by its ``EagleAclGraphManager``, which its worker
package deploys over vLLM's ``SpeculatorCudaGraphManager`` (``patch/worker/patch_v2/patch_eagle_speculator.py``;
the capture's dummy batch is its ``AscendInputBatch``, ``patch_input_batch.py``). At a call, the manager
launches the replay, then writes each captured attention task's host lengths for its step
(``build_draft_attn_metadatas``, ``update_full_graph_params``), which the replay waits for.

Here that graph is captured and replayed by the manager's own code on the simulator's recorder
(``fake_npu_graphs``; its Triton kernels each one launch of the graph, ``devices.sim.graph.launch``), the
draft's attention one task per step (``kit.ascend.tiny_attention``: what the FIA backend's draft update
rewrites). The first pass runs eagerly: its graph would replay the target's attention metadata from the
runner's persistent buffers, where the harness builds the target's metadata at each call. What the runner
gives its speculator is made as it makes it: the update stream, its model state (vllm-ascend's
``AscendModelState``, whose ``prepare_attn`` builds the capture's metadata, and which holds the call's
target metadata, read by ``build_draft_attn_metadatas``), block tables that stay in place (each call's
table copied in: a captured slot-mapping kernel reads them through their pointers), the draft layer's
backend (whose impl updates the captured tasks). ``dummy_run`` is the runner's dummy run (an idle DP rank's),
which replays the same graph.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from types import SimpleNamespace

import torch

from sim.impls.kit import mrv2_runner
from sim.impls.kit.ascend import patches, world
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend_mrv2 import generation

# What the worker package deploys that the decode graph needs: vllm-ascend's graph manager, its dummy input batch
GRAPH_PATCHES = ("patch_v2.patch_eagle_speculator", "patch_v2.patch_input_batch")


def lacks() -> str | None:
    """Why this checkout's MRV2 full graphs are not driven here, or None (main)."""
    init = patches.file(patches.WORKER, "__init__")
    absent = [
        n
        for n in GRAPH_PATCHES
        if not patches.file(patches.WORKER, n).exists() or not patches.deployed(init, patches.module(patches.WORKER, n))
    ]
    if not absent:
        return None
    return (
        f"this vllm-ascend's worker package deploys no {', '.join(absent)} on the vLLM it pairs with (0.23.0 keeps "
        "its v2 runner dormant on vLLM 0.23.0: patch/worker/__init__.py), so its MRV2 decode steps would replay "
        "through vLLM's own graph manager, which updates no captured attention task (vllm-ascend #11461 wires its "
        "own on main): not driven"
    )


@functools.cache
def deploy() -> None:
    """The worker package's graph patches applied, as its import applies them (once per process)."""
    for name in GRAPH_PATCHES:
        patches.execute(patches.module(patches.WORKER, name), patches.file(patches.WORKER, name), registered=True)


# What the fake torch.npu really has of what the checkout's torch_cuda_wrapper points torch.cuda at; the rest
# (current_device, mem_get_info: the runner's, never called on the drafting or sampling path) is assigned only.
REAL_NPU = (
    "Event", "Stream", "stream", "set_stream", "current_stream", "synchronize", "graph_pool_handle", "NPUGraph", "graph",
)  # fmt: skip
MISSING = object()  # an attribute torch.cuda had not before the block


@functools.cache
def _cuda_as_the_wrapper_sets_it() -> dict:
    """What the checkout's ``torch_cuda_wrapper`` (worker/v2/utils.py) assigns to ``torch.cuda``, run over a stand-in
    ``torch`` whose ``npu`` is the fake's (so no stand-in of the fake is touched, nothing of the process changed)."""
    wrapper = import_ascend("vllm_ascend.worker.v2.utils").torch_cuda_wrapper
    npu = SimpleNamespace(**{name: getattr(torch.npu, name) for name in REAL_NPU})
    npu.default_stream = torch.npu.current_stream  # the fake's only stream outside a stream context
    npu.current_device = npu.mem_get_info = None
    stand_in = SimpleNamespace(cuda=SimpleNamespace(), npu=npu)
    inner = wrapper.__wrapped__
    compiled = types.FunctionType(inner.__code__, {**inner.__globals__, "torch": stand_in}, inner.__name__)
    with contextlib.contextmanager(compiled)():
        pass
    return {name: value for name, value in vars(stand_in.cuda).items() if value is not None}


@contextlib.contextmanager
def cuda_as_npu():
    """``torch.cuda`` as vllm-ascend's MRV2 runner points it at ``torch.npu`` (its graph class and context, its
    streams and events), for the block only: the wrapper restores nothing, here the process's own come back."""
    before = {name: vars(torch.cuda).get(name, MISSING) for name in _cuda_as_the_wrapper_sets_it()}
    for name, value in _cuda_as_the_wrapper_sets_it().items():
        setattr(torch.cuda, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is MISSING:
                delattr(torch.cuda, name)
            else:
                setattr(torch.cuda, name, value)


@functools.lru_cache(maxsize=4)
def speculator(hidden_size: int, num_spec_tokens: int, capture_sizes: tuple[int, ...], method: str = "mtp"):
    """A full-graph speculator (FULL_DECODE_ONLY at ``capture_sizes``), built as the MRV2 runner builds it, with
    its update stream and model state; its graphs made per run (``fresh``)."""
    deploy()
    vllm_config = world.full_graph_config(hidden_size, num_spec_tokens, capture_sizes, method)
    world.single_rank_world(vllm_config)
    device = world.build_device()
    with world.recording(device):
        spec = generation.init_speculator()(vllm_config, device)
        spec.update_stream = torch.npu.Stream()  # the runner's (model_runner: speculator.update_stream)
    state = import_ascend("vllm_ascend.worker.v2.model_states.default").AscendModelState
    spec.model_state = state.__new__(state)  # its prepare_attn is vllm-ascend's; nothing else of it is read
    spec.model_state.max_model_len = vllm_config.model_config.max_model_len
    return spec


def fresh(spec, block_size: int, max_model_len: int, kernel_block_size: int = 0) -> None:
    """``spec`` as a new run finds it: no graph captured (managers made anew, vllm-ascend's draft graph params
    empty for them), its buffers as built, block tables for ``max_model_len`` tokens in ``block_size`` blocks (in
    ``kernel_block_size``-token kernel blocks where given)."""
    acl = import_ascend("vllm_ascend.compilation.acl_graph")
    acl._draft_graph_params = acl._draft_graph_prefill_params = None
    with cuda_as_npu():
        spec.init_cudagraph_manager(spec.vllm_config.compilation_config.cudagraph_mode)
    spec.graphs_captured = False
    mrv2_runner.start_fresh(spec)
    width = (-(-max_model_len // block_size) + 1) * (block_size // (kernel_block_size or block_size))
    table = torch.zeros(spec.max_num_reqs, width, dtype=torch.int32)
    spec.block_tables = mrv2_runner.block_tables(table, block_size, spec.max_num_tokens, kernel_block_size)


def hold(spec, block_table: torch.Tensor) -> None:
    """The call's block table copied into the speculator's, which stay in place (what a captured kernel reads): the
    staged table's request-state rows (``mrv2_runner.state_rows``) and the input table's batch rows."""
    rows, width = block_table.shape
    tables = spec.block_tables
    if width > tables.input_block_tables[0].shape[1]:
        raise ValueError(
            f"block_table of {width} columns: the run's tables hold {tables.input_block_tables[0].shape[1]}"
        )
    staged, given = tables.block_tables[0].gpu, tables.input_block_tables[0]
    staged.zero_()
    given.zero_()
    staged[mrv2_runner.state_rows(rows), :width] = block_table.to(torch.int32)
    given[:rows, :width] = block_table.to(torch.int32)


def captured_sizes(spec) -> list[int]:
    """The request counts the decode graph is captured at, ascending."""
    return sorted(desc.num_tokens for desc in spec.decode_cudagraph_manager.graphs)


def capture(spec, backend) -> None:
    """The decode steps' graphs, as ``speculator.capture`` captures them after the runner's dummy run (its
    ``input_batch`` the dummy batch of the largest size), through vllm-ascend's manager; the draft layer's
    ``backend`` the one whose impl updates them (``attn_backends``)."""
    if spec.graphs_captured:
        return
    spec.attn_backends = dict.fromkeys(sorted(spec.draft_attn_layer_names), backend)
    sizes = [d.num_tokens for descs in spec.decode_cudagraph_manager._capture_descs.values() for d in descs]
    largest = max(sizes, default=1)
    batch = import_ascend("vllm_ascend.worker.v2.input_batch").AscendInputBatch
    spec.input_batch = batch.make_dummy(largest, largest, spec.input_buffers)
    zeros = torch.zeros(spec.max_num_reqs)  # the dummy run's requests, greedy, in rows 0..largest-1
    spec._copy_request_inputs(largest, torch.arange(largest, dtype=torch.int64), zeros, zeros.to(torch.int64))
    build_wrapper = sys.modules[type(spec).capture.__module__].build_attn_metadata_wrapper
    with cuda_as_npu(), generation.propose_context(spec), build_wrapper():
        spec.decode_cudagraph_manager.capture(
            spec._multi_step_decode, spec.model_state, spec.input_buffers, spec.block_tables, spec.attn_groups,
            spec.kv_cache_config,
        )  # fmt: skip
    spec.graphs_captured = True


def dummy_run(spec, num_tokens: int, hidden_dtype: torch.dtype, target_buffers, whole_buffer: bool = False) -> int:
    """The speculator's part of the MRV2 runner's ``_dummy_run(num_tokens, uniform_decode=True)`` under
    FULL_DECODE_ONLY (a DP rank with no requests keeping step with its peers, ``execute_dummy_batch``): requests of
    the runner's decode query length in vllm-ascend's dummy ``AscendInputBatch`` (on the runner's ``target_buffers``),
    the dummy block tables and slots (``prepare_dummy_attn``: zeroed rows, every slot padding), the target's
    metadata the model state builds for a FULL dummy (``prepare_attn``, ``for_capture``), then ``propose`` with
    ``dummy_run=True``, one sampled token and none rejected per request, as ``sample_tokens`` calls it.
    ``whole_buffer``: the dummy batch handed the buffer's host lengths whole, as a real batch is (the sidestep of
    ``dummy-run-seq-lens-of-its-requests``). Returns the request rows its decode graph ran."""
    q = spec.num_speculative_steps + 1  # the runner's decode_query_len
    num_tokens = max(num_tokens, q)
    num_reqs = num_tokens // q
    # the runner's descriptor of a uniform decode (its graphs' sizes: the speculator's first-pass manager holds them)
    dp = import_ascend("vllm.v1.worker.gpu.dp_utils")
    desc, _ = dp.dispatch_cg_and_sync_dp(spec.prefill_cudagraph_manager, num_reqs, num_reqs * q, q, 1, 0)
    batch = import_ascend("vllm_ascend.worker.v2.input_batch").AscendInputBatch
    input_batch = batch.make_dummy(desc.num_reqs or num_reqs, desc.num_tokens, target_buffers)
    num_reqs, num_tokens = input_batch.num_reqs, input_batch.num_tokens
    if whole_buffer:  # crashes.SIDESTEPS
        input_batch.seq_lens_np = target_buffers.seq_lens_np
    tables = spec.block_tables.get_dummy_block_tables(num_reqs)
    slots = spec.block_tables.get_dummy_slot_mappings(num_tokens)
    full = import_ascend("vllm.config").CUDAGraphMode.FULL
    with generation.propose_context(spec):
        attn = spec.model_state.prepare_attn(
            input_batch, full, tables, slots, spec.attn_groups, spec.kv_cache_config, for_capture=True
        )
    layers = sorted(spec.draft_attn_layer_names)
    zeros = torch.zeros(spec.max_num_reqs)
    hidden = torch.zeros(num_tokens, spec.hidden_size, dtype=hidden_dtype)
    with cuda_as_npu():
        spec.propose(
            input_batch, attn, {name: slots[0] for name in layers}, hidden, None,
            torch.ones(num_reqs, dtype=torch.int32), torch.zeros(num_reqs, dtype=torch.int32),
            zeros.to(torch.int64), zeros.to(torch.int64), zeros, zeros.to(torch.int64),
            dummy_run=True, is_profile=False,
        )  # fmt: skip
    decode, _ = dp.dispatch_cg_and_sync_dp(spec.decode_cudagraph_manager, num_reqs, num_reqs, 1, 1, 0)
    return decode.num_reqs or num_reqs


def rows_blocks_slots(spec, rows: int, block_size: int) -> frozenset[int]:
    """Every slot of the blocks the speculator's request-state rows ``0..rows-1`` hold (its staged block table, which
    its slot kernel reads through ``idx_mapping``), the null block's and padding's aside."""
    blocks = {b for b in spec.block_tables.block_tables[0].gpu[:rows].flatten().tolist() if b > 0}
    return frozenset(b * block_size + o for b in blocks for o in range(block_size))
