"""What vllm-ascend's proposers read of their ``NPUModelRunner``, for one eager rank (plumbing only:
no value the gate compares comes from it). vllm-ascend 0.23.0 and main's ``AscendEagleProposer`` read
this view; 0.13.0's ``MtpProposer`` adds its own on top.
"""

from __future__ import annotations

import contextlib
import inspect
from types import SimpleNamespace

import numpy as np
import torch

from sim.impls.kit.ascend import runner_source
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.tiny_config import MAX_REQS, MAX_TOKENS


class RunnerView:
    """What ``AscendSpecDecodeBaseProposer`` reads of its runner: an eager rank, no PCP/DCP, no LoRA;
    one data-parallel rank, or one of several where vLLM's parallel state has them
    (``world.data_parallel_world``: ``_sync_metadata_across_dp`` is the runner's own).

    With ``vllm_config``, also what the runner's own ``propose_draft_token_ids`` reads (the
    runner's hand-off, ``handoff``): its buffers (``input_ids``, ``positions``,
    ``discard_request_indices``, filled per call by ``handoff.load``), ``requests``, ``drafter``,
    the configs, its ``attn_state`` (set per call by its own ``_build_attn_state``, as its input
    preparation sets it), and the runner methods it and the target's step call (its
    ``_determine_batch_execution_and_padding``), compiled from vllm-ascend's source
    (``runner_source.RunnerMethod``; ``_get_positions`` is vLLM's ``GPUModelRunner``'s, which
    ``NPUModelRunner`` inherits). A synchronous runner, unless ``handoff.scheduling`` makes a call
    asynchronous (its valid-count copy, and the next step's input ids and correction of the lengths
    counted ahead: vLLM's ``_compute_prev_positions`` and ``_prepare_input_ids``, the runner's
    ``_correct_optimistic_seq_lens_cpu``).
    """

    max_num_reqs = MAX_REQS
    max_num_tokens = MAX_TOKENS
    pcp_size = dcp_size = 1
    pcp_rank = dcp_rank = 0  # read by the proposer on v0.21.0rc and v0.22.1rc
    pin_memory = False
    enable_enpu = use_eagle = dynamic_eplb = False
    decode_token_per_req = 1
    uniform_decode_query_len = 1
    use_aux_hidden_state_outputs = False
    valid_sampled_token_count_event = None  # set only under async scheduling (``handoff.scheduling``)
    use_async_scheduling = use_async_spec_decode = False
    num_rejected_tokens_event = None  # v0.26.0rc's: set only under async scheduling
    num_discarded_requests = 0
    dp_size, dp_rank = 1, 0

    propose_draft_token_ids = runner_source.RunnerMethod("propose_draft_token_ids")
    _build_attn_state = runner_source.RunnerMethod("_build_attn_state")
    _copy_valid_sampled_token_count = runner_source.RunnerMethod("_copy_valid_sampled_token_count")
    _correct_optimistic_seq_lens_cpu = runner_source.RunnerMethod("_correct_optimistic_seq_lens_cpu")
    _log_propose_draft_token_ids_entry = runner_source.RunnerMethod("_log_propose_draft_token_ids_entry")  # main's
    use_cp = runner_source.RunnerMethod("use_cp", prop=True)  # 0.23.0's
    _sync_metadata_across_dp = runner_source.RunnerMethod("_sync_metadata_across_dp")
    _sync_batch_across_dp = runner_source.RunnerMethod("_sync_batch_across_dp")  # v0.18.0's batch execution's
    _determine_batch_execution_and_padding = runner_source.RunnerMethod("_determine_batch_execution_and_padding")
    _pad_for_sequence_parallelism = runner_source.RunnerMethod("_pad_for_sequence_parallelism")
    # v0.21.0rc and v0.22.1rc's (vLLM's)
    _get_valid_sampled_token_count = runner_source.RunnerMethod("_get_valid_sampled_token_count")

    # The sampling half of an iteration (``sim.impls.vllm_ascend.iteration``): no KV connector, pipeline
    # or expert load balancing, no debugger, no prompt logprobs, nothing routed; what it makes of its
    # own is set there.
    sample_tokens = runner_source.RunnerMethod("sample_tokens")
    _sample = runner_source.RunnerMethod("_sample")
    _bookkeeping_sync = runner_source.RunnerMethod("_bookkeeping_sync")
    _calc_spec_decode_metadata = runner_source.RunnerMethod("_calc_spec_decode_metadata")
    _finalize_dump_data = runner_source.RunnerMethod("_finalize_dump_data")
    _copy_draft_token_ids_to_cpu = runner_source.RunnerMethod("_copy_draft_token_ids_to_cpu")
    take_draft_token_ids = runner_source.RunnerMethod("take_draft_token_ids")
    _get_draft_token_ids_cpu = runner_source.RunnerMethod("_get_draft_token_ids_cpu")
    _get_cumsum_and_arange = runner_source.RunnerMethod("_get_cumsum_and_arange")
    _to_list = runner_source.RunnerMethod("_to_list")
    _get_prompt_logprobs_dict = runner_source.RunnerMethod("_get_prompt_logprobs_dict")

    @staticmethod
    def finalize_kv_connector():
        """vLLM's ``KVConnectorModelRunnerMixin``'s (no KV transfer group here: it does nothing)."""
        runner_source.base_class().finalize_kv_connector()

    execute_model_state = kv_connector_output = sampling_done_event = debugger = None
    is_kv_producer = need_accepted_tokens = supports_mm_inputs = routed_experts_initialized = False
    _debugger_started = False
    num_prompt_logprobs: dict = {}  # noqa: RUF012 - read only
    _draft_token_ids = _draft_token_req_ids = None

    def block_table_view(self, table: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """The block table the runner hands its drafter for ``table``'s requests: ``table`` itself (an
        eager runner's metadata is built from it at each call, so where it lives decides nothing), with
        rows of 0 up to ``rows`` where a padded step's metadata is built at that many."""
        pad = (rows or 0) - table.shape[0]
        return table if pad <= 0 else torch.cat([table, table.new_zeros(pad, table.shape[1])])

    use_dcp = runner_source.RunnerMethod("use_dcp", prop=True)  # main's

    def __init__(self, device: torch.device, vllm_config=None):
        self.device = device
        self.input_batch = SimpleNamespace(
            lora_id_to_lora_request={},
            num_computed_tokens_cpu=np.zeros(MAX_REQS, np.int32),
            num_prompt_tokens=np.zeros(MAX_REQS, np.int32),  # v0.24.0rc's batch execution reads it
        )
        self.actual_seq_lengths_q: list[int] = []
        self.attn_state = None
        self.model = None
        self.vllm_config = vllm_config
        if vllm_config is not None:
            self.drafter, self.requests = None, {}
            # as its constructor decides it (mtp and EAGLE drafts: True), which its drafter hands the draft's graph
            # wrapper: a merged draft graph replays with no synchronize before it
            self.use_eagle = runner_source.init_value("use_eagle", vllm_config=vllm_config)(self)
            self.uses_mrope = vllm_config.model_config.uses_mrope
            self.uses_xdrope_dim = vllm_config.model_config.uses_xdrope_dim
            self.input_ids = self._make_buffer(MAX_TOKENS, dtype=torch.int32)
            # the target's positions: a device tensor, or a host and device pair where vLLM's _get_positions
            # reads the device half (vLLM 0.18, under releases/v0.18.0's runner and drafter)
            paired = "self.positions.gpu" in inspect.getsource(self._get_positions)
            self.positions = (
                self._make_buffer(MAX_TOKENS, dtype=torch.int64)
                if paired
                else torch.zeros(MAX_TOKENS, dtype=torch.int64, device=device)
            )
            self.discard_request_indices = self._make_buffer(MAX_REQS, dtype=torch.int64)
            self.model_config, self.parallel_config = vllm_config.model_config, vllm_config.parallel_config
            self.cache_config, self.block_size = vllm_config.cache_config, vllm_config.cache_config.block_size
            self.max_model_len, self.max_encoder_len = vllm_config.model_config.max_model_len, 0
            self.is_pooling_model = False
            self.dp_size, self.dp_rank = (
                self.parallel_config.data_parallel_size,
                self.parallel_config.data_parallel_rank,
            )
            if runner_source.defines("_pad_for_sequence_parallelism"):
                # The worker's warm-up asks it first, under its config, where vllm-ascend caches what it
                # reads of the config (main's enable_dsa_cp); a step later runs outside any config.
                with import_ascend("vllm.config").set_current_vllm_config(vllm_config):
                    self._pad_for_sequence_parallelism(1)

    @property
    def ascend_config(self):
        return import_ascend("vllm_ascend.ascend_config").get_ascend_config()

    @property
    def speculative_config(self):
        return self.vllm_config.speculative_config

    @property
    def scheduler_config(self):
        return self.vllm_config.scheduler_config

    @property
    def target_positions(self) -> torch.Tensor:
        """The device tensor of the target's positions (``positions``, or its device half)."""
        return getattr(self.positions, "gpu", self.positions)

    def _make_buffer(self, *size, dtype, numpy=True):
        buffers = import_ascend("vllm.v1.utils")
        return buffers.CpuGpuBuffer(*size, dtype=dtype, device=self.device, pin_memory=False, with_numpy=numpy)

    def _use_aclgraph(self) -> bool:
        return False

    @contextlib.contextmanager
    def synchronize_input_prep(self):
        """main's dummy run holds it around its input copies: vLLM's ``GPUModelRunner`` version with no
        ``prepare_inputs_event`` (no async scheduling: one stream, nothing to wait for)."""
        yield

    def get_model(self):
        return self.model

    enable_prompt_embeds = False
    _get_positions = runner_source.RunnerMethod("_get_positions")  # the target's positions the hand-off gathers
    # async: each row's row the step before
    _compute_prev_positions = runner_source.RunnerMethod("_compute_prev_positions")
    _prepare_input_ids = runner_source.RunnerMethod("_prepare_input_ids")  # async: the next step's input ids
