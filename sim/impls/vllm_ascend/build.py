"""vllm-ascend's ``AscendEagleProposer`` built from a tiny local config and a plain runner.

It is built on the CPU here (the fake ``torch_npu``) and on the NPU on an Ascend
runner (``build_device``).

The config is the kit's real ``VllmConfig`` (``sim.impls.kit.tiny_config``: a ``deepseek_v3``
config with one next-n layer, vLLM chooses the MTP method; nothing downloaded, no weights). The
runner is ``RunnerView``: the attributes of vllm-ascend's ``NPUModelRunner``
that the proposer reads, with the values an eager single-rank runner has
(plumbing only: no value the gate compares comes from it). Buffers are sized
once (``MAX_TOKENS`` rows, ``MAX_REQS`` requests); per-call sizes are set by
``configured``.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from types import SimpleNamespace

import torch

from sim.impls.fresh_start import remember_fresh
from sim.impls.kit import tiny_config
from sim.impls.kit.tiny_config import MAX_REQS, MAX_TOKENS
from sim.impls.vllm_ascend.importing import import_ascend, prepare

MAX_SPEC_TOKENS = 8  # per-step buffers (slot_mapping_group, ...) exist for this many drafts


class RunnerView:
    """What ``AscendSpecDecodeBaseProposer`` reads of its runner: one eager rank, no PCP/DCP, no LoRA."""

    max_num_reqs = MAX_REQS
    max_num_tokens = MAX_TOKENS
    pcp_size = dcp_size = 1
    pin_memory = False
    enable_enpu = use_eagle = dynamic_eplb = False
    decode_token_per_req = 1
    uniform_decode_query_len = 1

    def __init__(self, device: torch.device):
        self.device = device
        self.input_batch = SimpleNamespace(lora_id_to_lora_request={})
        self.actual_seq_lengths_q: list[int] = []
        self.attn_state = None
        self.model = None

    def _make_buffer(self, *size, dtype, numpy=True):
        buffers = import_ascend("vllm.v1.utils")
        return buffers.CpuGpuBuffer(*size, dtype=dtype, device=self.device, pin_memory=False, with_numpy=numpy)

    def _use_aclgraph(self) -> bool:
        return False

    def _sync_metadata_across_dp(self, num_tokens: int, is_draft_model: bool = False):
        return num_tokens, None, False  # one data-parallel rank

    def get_model(self):
        return self.model


def build_device() -> torch.device:
    """Where the proposer and its buffers live: the NPU when the real ``torch_npu`` is in use (an
    Ascend runner), else the CPU (the fake ``torch_npu``)."""
    return torch.device("cpu" if prepare() else "npu")


def _vllm_config(hidden_size: int):
    """The kit's tiny DeepSeek-V3 ``VllmConfig`` (the same as the vLLM oracle's) on ``build_device()``,
    with vllm-ascend's config initialised from it; every per-step buffer exists for ``MAX_SPEC_TOKENS``."""
    vllm_config = tiny_config.vllm_config(
        import_ascend("vllm.config"), hidden_size, MAX_SPEC_TOKENS, build_device().type
    )
    import_ascend("vllm_ascend.ascend_config").init_ascend_config(vllm_config)
    return vllm_config


def single_rank_world(vllm_config) -> None:
    """vLLM's parallel state for one rank (gloo): ``set_ascend_forward_context`` asks the TP group its size."""
    state = import_ascend("vllm.distributed.parallel_state")
    if state._TP is not None:
        return
    config = import_ascend("vllm.config")
    init = f"file://{tempfile.mkdtemp(prefix='mtp_harness_ascend_')}/rendezvous"
    with config.set_current_vllm_config(vllm_config):
        state.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=init, local_rank=0, backend="gloo"
        )
        state.ensure_model_parallel_initialized(1, 1)


@functools.lru_cache(maxsize=8)
def ascend_proposer(hidden_size: int):
    """One ``AscendEagleProposer`` per hidden size, on ``build_device()``, its state as built
    remembered (``fresh_start.start_fresh``)."""
    eagle = import_ascend("vllm_ascend.spec_decode.eagle_proposer")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    logging.getLogger("vllm_ascend").setLevel(logging.ERROR)
    device = build_device()
    vllm_config = _vllm_config(hidden_size)
    single_rank_world(vllm_config)
    return remember_fresh(eagle.AscendEagleProposer(vllm_config, device, RunnerView(device)))


def configured(num_spec_tokens: int, block_size: int, max_model_len: int, hidden_size: int):
    """The shared proposer set to one call's sizes (``block_size`` is normally set by
    ``initialize_attn_backend``, which needs a loaded model)."""
    tiny_config.refuse_past_limits("the vllm-ascend adapter", max_model_len, num_spec_tokens, MAX_SPEC_TOKENS)
    proposer = ascend_proposer(hidden_size)
    proposer.num_speculative_tokens = num_spec_tokens
    proposer.block_size = block_size
    proposer.max_model_len = max_model_len
    proposer.vllm_config.model_config.max_model_len = max_model_len  # _run_merged_draft reads it from there
    return proposer
