"""vllm-ascend's ``AscendEagleProposer`` built from a tiny local config and a plain runner.

It is built on the CPU here (the fake ``torch_npu``) and on the NPU on an Ascend runner, in the kit's
world (``sim.impls.kit.ascend.world``: the device, the tiny ``deepseek_v3`` ``VllmConfig`` with one
next-n layer, vLLM choosing the MTP method, nothing downloaded, no weights; one rank's parallel
state). The runner is the kit's ``RunnerView`` (``sim.impls.kit.ascend.runner_view``): the attributes
of vllm-ascend's ``NPUModelRunner`` that the proposer reads, with the values an eager single-rank
runner has (plumbing only: no value the gate compares comes from it); ``GraphRunnerView`` adds what
the full-graph path reads. Buffers are sized once (``MAX_TOKENS`` rows, ``MAX_REQS`` requests);
per-call sizes are set by ``configured``.
"""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace

import numpy as np
import torch

from sim.impls.kit import tiny_config
from sim.impls.kit.ascend import runner_source, world
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.ascend.runner_view import RunnerView
from sim.impls.kit.ascend.world import MAX_SPEC_TOKENS, build_device, recording, single_rank_world
from sim.impls.kit.fresh_start import remember_fresh, start_fresh
from sim.impls.kit.tiny_config import MAX_REQS, MAX_TOKENS
from sim.impls.kit.vllm_model import LAYER
from sim.impls.vllm_ascend import attn_setup, branch_divergences, crashes, generation


def ascend_proposer(hidden_size: int, method: str = "mtp"):
    """One drafter per hidden size and drafting method, on ``build_device()``, its state as built remembered
    (``fresh_start.start_fresh``): ``AscendEagleProposer``, or for ``draft_model`` the checkout's
    ``AscendDraftModelProposer`` (vLLM's ``DraftModelProposer`` on vllm-ascend's base), as the runner picks."""
    return _ascend_proposer(hidden_size, method)


def drafter_class(method: str) -> type:
    """The drafter class vllm-ascend's runner builds for ``method``."""
    if method == "draft_model":
        return import_ascend("vllm_ascend.spec_decode.draft_proposer").AscendDraftModelProposer
    return import_ascend("vllm_ascend.spec_decode.eagle_proposer").AscendEagleProposer


@functools.lru_cache(maxsize=8)
def _ascend_proposer(hidden_size: int, method: str):
    drafter = drafter_class(method)
    generation.tell_builders_the_step()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    logging.getLogger("vllm_ascend").setLevel(logging.ERROR)
    device = build_device()
    vllm_config = world.vllm_config(hidden_size, method)
    single_rank_world(vllm_config)
    with recording(device):
        proposer = drafter(vllm_config, device, RunnerView(device, vllm_config))
    drafts_with(proposer.runner, proposer)
    return remember_fresh(proposer)


def drafts_with(runner, proposer) -> None:
    """What the runner's ``__init__`` decides from its drafter: whether the target hands it auxiliary
    hidden states (eagle3: ``use_aux_hidden_state_outputs``, the drafter's own answer)."""
    if proposer.method == "eagle3":
        runner.use_aux_hidden_state_outputs = proposer.eagle3_use_aux_hidden_state


def configured(
    num_spec_tokens: int,
    block_size: int,
    max_model_len: int,
    hidden_size: int,
    layers=(LAYER,),
    attn: str = "gqa",
    method: str = "mtp",
):
    """The shared proposer of drafting ``method`` set to one call's sizes, its draft attention (and so
    ``block_size``) set up by its own ``initialize_attn_backend`` for ``block_size``, the draft's
    ``layers`` and the attention family ``attn`` of its layer (``attn_setup``)."""
    tiny_config.refuse_past_limits("the vllm-ascend adapter", max_model_len, num_spec_tokens, MAX_SPEC_TOKENS)
    proposer = ascend_proposer(hidden_size, method)
    # What __init__ binds, bound again: a run calls the class's _run_merged_draft as it is now (a changed
    # vllm-ascend applied after the shared proposer was built, as a rank's per-case setup applies one).
    proposer._runnable = proposer._run_merged_draft
    proposer.num_speculative_tokens = num_spec_tokens
    # as the runner's constructor sets them for K drafts: a uniform decode's tokens (vLLM's, which a dummy run's
    # requests have) and vllm-ascend's decode_token_per_req (a DP rank's dummy batch: execute_dummy_batch)
    proposer.runner.uniform_decode_query_len = proposer.runner.decode_token_per_req = 1 + num_spec_tokens
    attn_setup.initialize(proposer, block_size, layers, attn)
    proposer.max_model_len = max_model_len
    proposer.vllm_config.model_config.max_model_len = max_model_len  # _run_merged_draft reads it from there
    return proposer


class _BlockTableView:
    """``input_batch.block_table[gid]`` as a dummy run reads it: the device table and slot buffer."""

    def __init__(self, device: torch.device, max_blocks: int):
        self.table = torch.full((MAX_REQS, max_blocks), -1, dtype=torch.int32, device=device)
        self.slot_mapping = SimpleNamespace(  # v0.21.0rc and v0.22.1rc's dummy runs read its host half too
            gpu=torch.full((MAX_TOKENS,), -1, dtype=torch.int32, device=device),
            cpu=torch.full((MAX_TOKENS,), -1, dtype=torch.int32),
        )

    def get_device_tensor(self) -> torch.Tensor:
        return self.table

    def hold(self, table: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """``table``'s rows written into this persistent table (-1 elsewhere), as the runner's input
        preparation writes its requests' rows, and the view of them it hands on: ``rows`` of them where
        a padded step's metadata is built at that many, the padded requests' rows 0 (as
        ``_build_attention_metadata`` fills them)."""
        (n, cols), width = table.shape, self.table.shape[1]
        if cols > width and (table[:, width:] >= 0).any():
            raise ValueError(f"block table of {cols} columns: the runner's holds {width}")
        self.table.fill_(-1)
        self.table[:n, : min(cols, width)] = table[:, :width]
        rows = n if rows is None else rows
        self.table[n:rows] = 0
        return self.table[:rows]


def block_tables(
    device: torch.device, block_size: int, max_model_len: int, kernel_block_size: int = 0
) -> list[_BlockTableView]:
    """The runner's per-group tables (``input_batch.block_table``) for ``block_size``-token draft blocks:
    each group's as wide as ``max_model_len`` needs at the group's block size (group 0 at the draft's
    where it holds the draft's blocks too, ``drafts_in_group_0``), in kernel blocks of
    ``kernel_block_size`` tokens where given (a hybrid target's: its ``BlockTable``'s
    ``max_num_blocks_per_req`` times the kernel blocks per block)."""
    groups = attn_setup.kv_cache_config(block_size, 1).kv_cache_groups
    sizes = [g.kv_cache_spec.block_size for g in groups]
    if drafts_in_group_0():
        sizes[0] = block_size
    per_block = block_size // (kernel_block_size or block_size)
    return [_BlockTableView(device, -(-max_model_len // size) * per_block) for size in sizes]


def drafts_in_group_0() -> bool:
    """Whether the full-graph runner's group 0 holds each call's draft blocks too, as a deployment whose
    draft layers share group 0 (one group for all, as DeepSeek V3's) does: where
    ``full-graph-capture-reads-group-0-block-table`` is in force (v0.21.0rc, v0.22.1rc), so that their
    replays read the draft's blocks and everything else of them is compared; its pin runs without."""
    return generation.capture_reads_group_0()


class GraphRunnerView(RunnerView):
    """``RunnerView`` of a runner with ACL graphs: what the full-graph path reads besides.

    ``cudagraph_dispatcher`` is vLLM's own ``CudagraphDispatcher`` with the keys vllm-ascend's runner
    initialises (``initialize_cudagraph_keys(cudagraph_mode, uniform_decode_query_len)``);
    ``_pad_query_start_loc_for_fia`` is ``NPUModelRunner``'s own. ``seq_lens`` and
    ``optimistic_seq_lens_cpu`` are the runner's per-request lengths, which ``_propose`` reads in
    FULL mode instead of the metadata's (the adapter writes the batch's there, as the runner's
    input preparation does: ``seq_lens_device`` and ``seq_lens_host``, which are v0.18.0's ``seq_lens``
    pair). The rest is what a dummy run builds its capture metadata from: inert
    (slots -1, lengths 0), so a capture writes no KV.
    """

    def __init__(self, device: torch.device, vllm_config):
        super().__init__(device, vllm_config)
        self.compilation_config = vllm_config.compilation_config
        self.uniform_decode_query_len = 1 + vllm_config.speculative_config.num_speculative_tokens
        self.decode_token_per_req = self.uniform_decode_query_len
        self.arange_np = np.arange(MAX_TOKENS + 1, dtype=np.int32)
        if generation.runner_lengths_paired():
            self.seq_lens = self._make_buffer(MAX_REQS, dtype=torch.int32)
        else:
            self.seq_lens = torch.zeros(MAX_REQS, dtype=torch.int32, device=device)
            self.optimistic_seq_lens_cpu = torch.zeros(MAX_REQS, dtype=torch.int32)
        # v0.18.0 reads it
        self.cudagraph_batch_sizes = (
            sorted(self.compilation_config.cudagraph_capture_sizes) if self._use_aclgraph() else []
        )
        self.query_start_loc = self._make_buffer(MAX_REQS + 2, dtype=torch.int32)
        computed = torch.zeros(MAX_REQS, dtype=torch.int32)
        self.input_batch = SimpleNamespace(
            lora_id_to_lora_request={},
            num_computed_tokens_cpu_tensor=computed,
            num_computed_tokens_cpu=computed.numpy(),
            num_prompt_tokens=np.zeros(MAX_REQS, np.int32),  # v0.24.0rc's batch execution reads it
            block_table=block_tables(device, 16, tiny_config.MAX_MODEL_LEN),  # sized per run: configured_graph
        )
        self.attn_groups = [[None]]  # a dummy run asks only that there are some
        for name in ("group_len", "group_key_idx", "group_key_cache_idx"):  # main's, handed to the builders
            setattr(self, name, self._make_buffer(MAX_TOKENS, dtype=torch.int32))
        self.cudagraph_dispatcher = import_ascend("vllm.v1.cudagraph_dispatcher").CudagraphDispatcher(vllm_config)
        self.cudagraph_dispatcher.initialize_cudagraph_keys(
            self.compilation_config.cudagraph_mode, self.uniform_decode_query_len
        )
        self.attn_state = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState.SpecDecoding

    _pad_query_start_loc_for_fia = runner_source.RunnerMethod("_pad_query_start_loc_for_fia")

    @property
    def seq_lens_device(self) -> torch.Tensor:
        """The per-request lengths on the device (``seq_lens``, or its device half)."""
        return getattr(self.seq_lens, "gpu", self.seq_lens)

    @property
    def seq_lens_host(self) -> torch.Tensor:
        """Their host copy (``optimistic_seq_lens_cpu``, or the pair's host half)."""
        return self.seq_lens.cpu if hasattr(self.seq_lens, "gpu") else self.optimistic_seq_lens_cpu

    def block_table_view(self, table: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """The draft group's persistent table holding ``table``'s rows, and the view of them (``rows``
        of them, ``_BlockTableView.hold``) the runner hands its drafter: what a dummy run captured its
        metadata on, so a kernel that reads the table as a device tensor (SFA's) reads this call's at
        every replay, as on an NPU."""
        if drafts_in_group_0():
            self.input_batch.block_table[0].hold(table, rows)
        return self.input_batch.block_table[self.drafter.kv_cache_gid].hold(table, rows)

    _offload_req_ids_tensor = _offload_token_to_req = None  # main: sparse KV offload buffers (disabled)

    def _use_aclgraph(self) -> bool:
        """The runner's test of its cudagraph mode (its compilation mode is VLLM_COMPILE on an NPU serving ACL
        graphs, and nothing is eager by config here): no graphs where vLLM refused every size."""
        return self.compilation_config.cudagraph_mode != import_ascend("vllm.config").CUDAGraphMode.NONE


def graph_proposer(hidden_size: int, num_spec_tokens: int, capture_sizes: tuple[int, ...], method: str = "mtp"):
    """A full-graph drafter (``drafter_class``) of drafting ``method`` on a ``GraphRunnerView`` (its draft is
    wrapped per run, ``configured_graph``)."""
    drafter = drafter_class(method)
    generation.tell_builders_the_step()
    config = import_ascend("vllm.config")
    device = build_device()
    vllm_config = world.full_graph_config(hidden_size, num_spec_tokens, capture_sizes, method)
    single_rank_world(vllm_config)
    with config.set_current_vllm_config(vllm_config), recording(device):
        proposer = drafter(vllm_config, device, GraphRunnerView(device, vllm_config))
    drafts_with(proposer.runner, proposer)
    proposer.update_stream = torch.npu.Stream()
    return proposer


def wrap_draft(proposer) -> None:
    """``load_model``'s wrapping of the draft (``_maybe_share_lm_head``, without the weight sharing a
    tiny model has no use for): a new ``ACLGraphWrapper`` (no graph captured) around ``_run_merged_draft``,
    or, where the checkout wraps an MTP draft's model instead (v0.18.0) and its pin runs it, none yet:
    ``graphed_model`` wraps the model the adapter hands."""
    proposer.graphed_model = None
    if _captures_the_model(proposer.method):
        proposer._runnable = proposer._run_merged_draft
        return
    proposer._runnable = _acl_graph_wrapper(proposer, proposer._run_merged_draft)


def _captures_the_model(method: str) -> bool:
    """Whether the draft's graphs capture its model per forward: where the checkout does
    (``generation.graphs_wrap_the_model``), a crash that everything but its pin sidesteps as its fix does,
    by capturing the merged draft (``branch_divergences.MTP_MODEL_GRAPH``)."""
    return generation.graphs_wrap_the_model(method) and not crashes.sidestepped(branch_divergences.MTP_MODEL_GRAPH.id)


def graphed_model(proposer, model):
    """The draft model as ``proposer`` forwards it: ``model``, or, where its graphs capture the model per
    forward (``_captures_the_model``), one ``ACLGraphWrapper`` around it for the run."""
    if not isinstance(proposer.runner, GraphRunnerView) or not _captures_the_model(proposer.method):
        return model
    if proposer.graphed_model is None or proposer.graphed_model.runnable is not model:
        proposer.graphed_model = _acl_graph_wrapper(proposer, model)
    return proposer.graphed_model


def _acl_graph_wrapper(proposer, runnable):
    config = import_ascend("vllm.config")
    acl = import_ascend("vllm_ascend.compilation.acl_graph")
    return acl.ACLGraphWrapper(
        runnable,
        proposer.vllm_config,
        runtime_mode=config.CUDAGraphMode.FULL,
        use_eagle=proposer.use_eagle,
        enable_enpu=proposer.enable_enpu,
    )


@functools.lru_cache(maxsize=8)
def _graph_proposer(hidden_size: int, num_spec_tokens: int, capture_sizes: tuple[int, ...], method: str):
    return remember_fresh(graph_proposer(hidden_size, num_spec_tokens, capture_sizes, method))


def configured_graph(cfg, capture_sizes, attn: str = "gqa", kernel_block_size: int = 0):
    """The full-graph proposer for ``cfg``'s hidden size, drafting method and draft count at
    ``capture_sizes``, its draft layer of the attention family ``attn``, its runner's tables of
    ``kernel_block_size``-token kernel blocks where given (a hybrid target's), as built: its draft newly wrapped
    (no graph captured: a run captures its own), the draft graph params set empty for its capture sizes
    as the runner sets them before capturing, its buffers fresh. One full-graph proposer is in use at a
    time (vllm-ascend's draft graph params are global)."""
    tiny_config.refuse_past_limits("the vllm-ascend adapter", cfg.max_model_len, cfg.num_spec_tokens, MAX_SPEC_TOKENS)
    proposer = _graph_proposer(cfg.hidden_size, cfg.num_spec_tokens, tuple(sorted(set(capture_sizes))), cfg.method)
    start_fresh(proposer)
    wrap_draft(proposer)
    acl = import_ascend("vllm_ascend.compilation.acl_graph")
    sizes = sorted(
        {d.num_tokens for _, descs in proposer.runner.cudagraph_dispatcher.get_capture_descs() for d in descs}
    )
    acl._draft_graph_params = None
    acl.set_draft_graph_params(sizes)
    attn_setup.initialize(proposer, cfg.block_size, attn=attn)
    proposer.runner.input_batch.block_table = block_tables(
        proposer.device, cfg.block_size, cfg.max_model_len, kernel_block_size
    )
    proposer.max_model_len = cfg.max_model_len
    proposer.vllm_config.model_config.max_model_len = cfg.max_model_len
    return proposer
