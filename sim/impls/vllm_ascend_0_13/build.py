"""vllm-ascend 0.13.0's ``MtpProposer`` built on CPU from the shared tiny config and a plain runner.

The config is ``sim.impls.kit.ascend.world``'s real ``VllmConfig`` (a tiny ``deepseek_v3``
with one next-n layer: method ``mtp``, MLA attention). ``RunnerView`` adds what 0.13's
``MtpProposer`` reads of its ``NPUModelRunner`` on top of 0.23's view: the PCP/DCP ranks,
the runner's ``with_prefill`` flag (set per call, as the runner derives it), its 4-value
``_sync_metadata_across_dp`` (one data-parallel rank), the CUDA-graph dispatcher (eager),
the model config and the attention group whose builder ``_propose`` calls. All plumbing:
no value the gate compares comes from it.
"""

from __future__ import annotations

import functools
import logging
from types import SimpleNamespace

import torch

from sim.impls.kit import tiny_config
from sim.impls.kit.ascend import world
from sim.impls.kit.ascend.runner_view import RunnerView as AscendRunnerView
from sim.impls.kit.fresh_start import remember_fresh
from sim.impls.vllm_ascend_0_13.importing import import_ascend, rope_tables
from sim.impls.vllm_ascend_0_13.mla_metadata import MlaMetadataBuilder

MAX_SPEC_TOKENS = world.MAX_SPEC_TOKENS


class EagerDispatcher:
    """The runner's ``cudagraph_dispatcher`` on an eager runner: no graph, no batch descriptor."""

    def dispatch(self, num_tokens: int, uniform_decode: bool = False, has_lora: bool = False):
        return import_ascend("vllm.config").CUDAGraphMode.NONE, None


class RunnerView(AscendRunnerView):
    """What vllm-ascend 0.13's ``MtpProposer`` reads of ``NPUModelRunner``: one eager rank."""

    pcp_rank = dcp_rank = 0
    cudagraph_batch_sizes: list[int] = []

    def __init__(self, device: torch.device, vllm_config):
        super().__init__(device)
        self.with_prefill = False
        self.model_config = vllm_config.model_config
        self.cudagraph_dispatcher = EagerDispatcher()
        self.builder = MlaMetadataBuilder()
        self.attn_groups = [[self.builder]]
        self.input_batch = SimpleNamespace(lora_id_to_lora_request={}, num_reqs=0)

    def _sync_metadata_across_dp(self, num_tokens: int, with_prefill: bool = False, cudagraph_mode: int = 0, **_):
        """``NPUModelRunner._sync_metadata_across_dp`` with ``dp_size == 1``: everything as given."""
        return num_tokens, None, with_prefill, cudagraph_mode


@functools.lru_cache(maxsize=8)
def mtp_proposer(hidden_size: int):
    """One 0.13.0 ``MtpProposer`` per hidden size, on CPU."""
    mtp = import_ascend("vllm_ascend.spec_decode.mtp_proposer")
    rope_tables()
    logging.getLogger("vllm").setLevel(logging.ERROR)
    logging.getLogger("vllm_ascend").setLevel(logging.ERROR)
    cpu = torch.device("cpu")
    vllm_config = world.vllm_config(hidden_size)
    world.single_rank_world(vllm_config)
    proposer = mtp.MtpProposer(vllm_config, cpu, RunnerView(cpu, vllm_config))
    proposer.use_cuda_graph = False  # eager: ACL graphs need an NPU
    return remember_fresh(proposer)  # each run starts from this state (fresh_start.start_fresh)


def configured(num_spec_tokens: int, max_model_len: int, hidden_size: int, padded: bool = True, block_size=None):
    """The shared proposer set to one call's sizes and mode (``disable_padded_drafter_batch`` is the
    unpadded mode; the MLA builder's decode threshold is 1 + K, as in 0.13's builder). ``block_size``:
    the cache's, as a runner's config holds it (0.13's step loop never reads it; a fix of its
    ``slot-plus-one`` does)."""
    tiny_config.refuse_past_limits("the vllm-ascend 0.13 adapter", max_model_len, num_spec_tokens, MAX_SPEC_TOKENS)
    p = mtp_proposer(hidden_size)
    p.num_speculative_tokens = num_spec_tokens
    p.max_model_len = max_model_len
    p.vllm_config.model_config.max_model_len = max_model_len  # _propose reads runner.model_config.max_model_len
    p.speculative_config.disable_padded_drafter_batch = not padded
    p.runner.builder.decode_threshold = 1 + num_spec_tokens
    if block_size is not None:
        p.vllm_config.cache_config.block_size = block_size
    return p
