"""The draft's lm head split by vocabulary over ranks: vllm-ascend's lm-head tensor parallelism across
data-parallel ranks (``finegrained_tp_config.lmhead_tensor_parallel_size``), as a DP deployment of a MoE
model runs it, and the plain tensor-parallel split of a TP deployment (``over_tp``).

The lm head is split by vocabulary over the ranks of vllm-ascend's lm-head TP group (``_LMTP``, made
of DP ranks): every logits computation all-gathers the ranks' hidden rows, multiplies them by the
rank's slice of the vocabulary and hands each rank back its own rows' whole vocabulary (an all-to-all:
``AscendLogitsProcessor._get_logits_lmheadtp``). So every rank computes logits at the same row count
at the same time: the drafter pads its sample rows to the runner's ``max_num_reqs`` for it
(``lmhead_tp_enable()`` in ``_propose``), and a rank with no requests computes them in its dummy runs.
A rank that computes logits at another count, or skips one, leaves its peers waiting.

``across_dp`` turns it on for one DP case in a rank process: the group over the DP ranks (vLLM's
``init_model_parallel_group`` on gloo, what ``init_ascend_model_parallel`` makes for that size) and the
size in vllm-ascend's config.

Either way the head is the checkout's own ``AscendParallelLMHead``, holding this rank's rows of the tiny
lm head (``parallel_head``: its comm group the lm-head TP group, or the TP group), and the logits are its
``AscendLogitsProcessor``'s (``compute_logits_over_tp``): under lm-head TP ``_get_logits_lmheadtp``
(main: ``lmhead_all_to_all``); on TP ranks (``world.tensor_parallel_world``) all-gathered over the TP
group, or under ``enable_reduce_sample`` this rank's columns only, which the drafter's ``greedy_sample``
reduces over the group itself. The collectives and their shapes are vllm-ascend's own.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from sim.impls.kit.ascend.importing import import_ascend


def enabled() -> bool:
    """Whether vllm-ascend's config has lm-head TP on (the checkout's ``lmhead_tp_enable``)."""
    return import_ascend("vllm_ascend.utils").lmhead_tp_enable()


def over_tp() -> bool:
    """Whether vLLM's tensor-parallel group has several ranks in this process: the lm head is split over them."""
    state = import_ascend("vllm.distributed.parallel_state")
    return state._TP is not None and state._TP.world_size > 1


def _group(size: int):
    """vllm-ascend's lm-head TP group over this process's ``size`` DP ranks, made once per process."""
    groups = import_ascend("vllm_ascend.distributed.parallel_state")
    if groups._LMTP is None:
        vllm = import_ascend("vllm.distributed.parallel_state")
        group = vllm.init_model_parallel_group(
            [list(range(size))], vllm.get_world_group().local_rank, "gloo", group_name="lmheadtp"
        )
        # vLLM's collective custom ops are registered for the NPU's dispatch key; on the simulator's CPU
        # tensors the group calls what they wrap, its device communicator's collective, directly
        group.use_custom_op_call = False
        # vllm-ascend's worker (0.23.0's) patches vLLM's GroupCoordinator with an all_to_all that hands the
        # call to the group's device communicator (``patch_distributed``, which does not import here: its
        # package imports torchvision), the checkout's ``NPUCommunicator.all_to_all``; main's logits
        # processor calls ``all_to_all_single`` on the group itself (``lmhead_all_to_all``)
        communicator = group.device_communicator
        if type(communicator).__name__ != "NPUCommunicator":
            raise TypeError(f"lm-head TP group: a {type(communicator).__name__}, not vllm-ascend's NPUCommunicator")
        if hasattr(communicator, "all_to_all"):
            group.all_to_all = communicator.all_to_all
        groups._LMTP = group
    if groups._LMTP.world_size != size:
        raise ValueError(f"lm-head TP over {size} DP ranks: this rank process's group has {groups._LMTP.world_size}")
    return groups._LMTP


def _finegrained():
    """vllm-ascend's fine-grained TP config of its current config, None before any is made."""
    config = import_ascend("vllm_ascend.ascend_config")._ASCEND_CONFIG
    return None if config is None else config.finegrained_tp_config


@contextlib.contextmanager
def across_dp(size: int):
    """Inside, vllm-ascend's lm-head TP over the ``size`` DP ranks: its group, and its size in vllm-ascend's
    config, the current one's (a proposer built before, in this rank process) and that of every proposer
    built inside (``world.deployed``)."""
    from sim.impls.kit.ascend import world

    _group(size)
    # vLLM's device communicator gathers with torch's all_gather_into_tensor, which warns on every call
    warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*deprecated", category=FutureWarning)
    with world.deployed({"finegrained_tp_config": {"lmhead_tensor_parallel_size": size}}):
        if _finegrained() is not None:
            _finegrained().lmhead_tensor_parallel_size = size
        try:
            yield
        finally:
            if _finegrained() is not None:
                _finegrained().lmhead_tensor_parallel_size = 0  # off, as outside any lm-head TP case


@functools.lru_cache(maxsize=4)
def _logits_processor(vocab_size: int):
    """The checkout's ``AscendLogitsProcessor`` for ``vocab_size`` ids, made under the current vllm-ascend
    config's ``VllmConfig`` (vLLM reads its head dtype from it)."""
    config = import_ascend("vllm.config")
    vllm_config = import_ascend("vllm_ascend.ascend_config").get_ascend_config().vllm_config
    with config.set_current_vllm_config(vllm_config):
        return import_ascend("vllm_ascend.ops.vocab_parallel_embedding").AscendLogitsProcessor(vocab_size)


def parallel_head(tiny):
    """The checkout's ``AscendParallelLMHead`` for ``tiny``'s vocabulary on this rank of its group (the
    lm-head TP group where lm-head TP is on, else the TP group): the tiny lm head's rows given to the
    head's own weight loader, which keeps this rank's slice (vLLM pads the vocabulary to a multiple of 64
    and splits that evenly; padded rows are zeros)."""
    config = import_ascend("vllm.config")
    vllm_config = import_ascend("vllm_ascend.ascend_config").get_ascend_config().vllm_config
    heads = import_ascend("vllm_ascend.ops.vocab_parallel_embedding")
    vocab, hidden = tiny.lm_head.shape
    with config.set_current_vllm_config(vllm_config):
        head = heads.AscendParallelLMHead(vocab, hidden, params_dtype=tiny.lm_head.dtype, prefix="shared_head.head")
    head.weight_loader(head.weight, tiny.lm_head.detach())
    return head


def compute_logits_over_tp(tiny, head, hidden_states: torch.Tensor) -> torch.Tensor:
    """The draft's logits of ``hidden_states`` on this rank: the checkout's ``AscendLogitsProcessor`` on
    ``head`` (``parallel_head``), after the tiny model's head norm, as DeepSeek's MTP layer computes them."""
    return _logits_processor(tiny.vocab_size)(head, tiny.head_input(hidden_states))


def gather_logits(tiny, logits: torch.Tensor) -> torch.Tensor:
    """This rank's columns of the draft's logits gathered over the TP group, by the checkout's processor."""
    return _logits_processor(tiny.vocab_size)._gather_logits(logits)
