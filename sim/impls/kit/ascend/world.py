"""Where a vllm-ascend proposer is built: its device (the NPU, or the simulated ``cpu:0``), the
kit's tiny ``VllmConfig`` with vllm-ascend's config initialised from it, and vLLM's parallel state:
one rank's, or a data-parallel rank's among several (``data_parallel_world``). Every vllm-ascend
adapter builds its proposer in this world.
"""

from __future__ import annotations

import contextlib
import datetime

import torch

from devices.sim import early_reads
from sim.impls.kit import tiny_config
from sim.impls.kit.ascend import fake_torch_npu
from sim.impls.kit.ascend.importing import import_ascend, prepare
from sim.impls.kit.scratch import scratch

MAX_SPEC_TOKENS = 8  # per-step buffers (slot_mapping_group, ...) exist for this many drafts


def build_device() -> torch.device:
    """Where the proposer and its buffers live: the NPU when the real ``torch_npu`` is in use (an
    Ascend runner), else the simulated device ``cpu:0`` (the fake ``torch_npu``): CPU memory, named
    with an index so that ``.to(self.device)`` is told from ``.to("cpu")`` (``devices.sim.early_reads``)."""
    return early_reads.SIM_DEVICE if prepare() else torch.device("npu")


def recording(device: torch.device):
    """Around a proposer's construction on the simulator: its buffers made on ``device`` are device
    tensors to ``devices.sim.early_reads`` (on an NPU their device says so)."""
    return early_reads.recording(device) if device.type == "cpu" else contextlib.nullcontext()


_DEPLOYED: dict = {}  # vllm-ascend's additional_config of the deployment (``deployed``)


@contextlib.contextmanager
def deployed(additional_config: dict):
    """Inside, the proposers built get vllm-ascend's ``additional_config`` (e.g. a DP case's lm-head TP)."""
    before = dict(_DEPLOYED)
    _DEPLOYED.clear()
    _DEPLOYED.update(additional_config)
    try:
        yield
    finally:
        _DEPLOYED.clear()
        _DEPLOYED.update(before)


def vllm_config(hidden_size: int, method: str = "mtp"):
    """The kit's tiny DeepSeek-V3 ``VllmConfig`` (the same as the vLLM oracle's) for drafting ``method``
    on ``build_device()``, deployed (``deploy``); every per-step buffer exists for ``MAX_SPEC_TOKENS``."""
    return deploy(tiny_vllm_config(hidden_size, MAX_SPEC_TOKENS, method))


def tiny_vllm_config(hidden_size: int, num_spec_tokens: int, method: str = "mtp"):
    """The kit's tiny ``VllmConfig``, built as a serving process builds its one: on a vllm-ascend config
    of its own. The platform's ``check_and_update_config`` initialises vllm-ascend's config singleton
    from it, which v0.20.2rc reuses for any later ``VllmConfig`` (later branches rebuild it for a new
    one): one eager config's choices (``enable_npugraph_ex`` off) would be the next one's."""
    import_ascend("vllm_ascend.ascend_config")._ASCEND_CONFIG = None
    return tiny_config.vllm_config(
        import_ascend("vllm.config"), hidden_size, num_spec_tokens, build_device().type, method
    )


def full_graph_config(hidden_size: int, num_spec_tokens: int, capture_sizes: tuple[int, ...], method: str = "mtp"):
    """The tiny ``VllmConfig`` of drafting ``method`` with ``num_spec_tokens`` drafts and FULL_DECODE_ONLY
    ACL graphs (the full mode vllm-ascend documents for its drafts) at ``capture_sizes``, rounded up to
    multiples of ``num_spec_tokens + 1`` by vLLM's own ``adjust_cudagraph_sizes_for_spec_decode``; where
    none fits under the largest size (vLLM's ValueError), no graphs (cudagraph mode NONE)."""
    config = import_ascend("vllm.config")
    vllm_config = tiny_vllm_config(hidden_size, num_spec_tokens, method)
    # Built for a synchronous deployment (handoff.scheduling makes a call asynchronous): v0.18.0's MTP drafter
    # reads the setting once, and captures no graphs under asynchronous scheduling; later ones never read it.
    vllm_config.scheduler_config.async_scheduling = False
    compilation = vllm_config.compilation_config
    compilation.cudagraph_mode = config.CUDAGraphMode.FULL_DECODE_ONLY
    compilation.cudagraph_capture_sizes = sorted(set(capture_sizes))
    compilation.max_cudagraph_capture_size = max(capture_sizes)
    try:
        compilation.adjust_cudagraph_sizes_for_spec_decode(num_spec_tokens + 1, 1)
    except ValueError:  # no multiple of num_spec_tokens + 1 up to the largest size: vLLM refuses graphs
        compilation.cudagraph_mode = config.CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
    return deploy(vllm_config)


def deploy(vllm_config):
    """``vllm_config`` placed on this rank (``placed``), with the deployment's ``additional_config``
    (``deployed``) and vllm-ascend's config initialised from it, as a serving process's is from the
    start (each branch's ``init_ascend_config`` would keep the one the platform made without it):
    what every proposer is built with."""
    vllm_config.additional_config = dict(_DEPLOYED)
    placed(vllm_config)
    configs = import_ascend("vllm_ascend.ascend_config")
    configs._ASCEND_CONFIG = None  # the platform's, built before the deployment's additional_config was set
    configs.init_ascend_config(vllm_config)
    return vllm_config


def placed(vllm_config) -> None:
    """``vllm_config``'s parallel config told this rank's data- or tensor-parallel place, where vLLM's
    parallel state has several ranks (``data_parallel_world``, ``tensor_parallel_world``); one rank's
    otherwise."""
    state = import_ascend("vllm.distributed.parallel_state")
    parallel = vllm_config.parallel_config
    if state._DP is not None and state._DP.world_size > 1:
        parallel.data_parallel_size, parallel.data_parallel_rank = state._DP.world_size, state._DP.rank_in_group
    if state._TP is not None and state._TP.world_size > 1:
        parallel.tensor_parallel_size = state._TP.world_size


def data_parallel_world(rank: int, size: int, timeout_s: float = 10.0) -> None:
    """vLLM's parallel state for data-parallel rank ``rank`` of ``size`` (TP 1), on the process group
    this process already belongs to (a ``sim.ranks`` pool's gloo group): vLLM's own
    ``init_distributed_environment`` and ``ensure_model_parallel_initialized``, its DP group's
    collectives over gloo, each given up after ``timeout_s`` (vLLM's groups wait 30 minutes). Before
    any proposer is built (``single_rank_world`` then finds it); once per process."""
    _parallel_world("_DP", rank, size, timeout_s)


def tensor_parallel_world(rank: int, size: int, timeout_s: float = 10.0) -> None:
    """vLLM's parallel state for tensor-parallel rank ``rank`` of ``size`` (DP 1), as
    ``data_parallel_world`` makes a DP rank's: its TP group's collectives over gloo."""
    _parallel_world("_TP", rank, size, timeout_s)


def _parallel_world(name: str, rank: int, size: int, timeout_s: float) -> None:
    import torch.distributed as dist

    state = import_ascend("vllm.distributed.parallel_state")
    made = getattr(state, name)
    if made is not None and (made.world_size, made.rank_in_group) == (size, rank):
        return  # made by an earlier case of this rank process
    if not dist.is_initialized() or dist.get_world_size() != size:
        what = {"_DP": "data", "_TP": "tensor"}[name]
        raise ValueError(f"{what}_parallel_world(rank={rank}, size={size}): needs this process in a group of {size}")
    fake_torch_npu.register_device_hooks()
    config = import_ascend("vllm.config")
    vllm_config = tiny_vllm_config(64, 1)
    parallel = vllm_config.parallel_config
    if name == "_DP":
        parallel.data_parallel_size, parallel.data_parallel_rank = size, rank
    else:
        parallel.tensor_parallel_size = size
    tp = size if name == "_TP" else 1
    with config.set_current_vllm_config(vllm_config):
        # the group exists: vLLM joins it (no init method is used); a DP rank offsets its rank by its DP rank
        state.init_distributed_environment(world_size=tp, rank=rank if tp > 1 else 0, local_rank=0, backend="gloo")
        state.ensure_model_parallel_initialized(tp, 1)
    group = getattr(state, name)
    # a TP group's shared-memory broadcaster (vLLM's executor-side broadcast, unused here) let go at once,
    # so no shared memory outlives the rank (its creator unlinks it when it goes)
    group.mq_broadcaster = None
    for g in (group.cpu_group, group.device_group):
        g.set_timeout(datetime.timedelta(seconds=timeout_s))  # a peer at another collective


def forget_model_facts() -> None:
    """vllm-ascend remembers, once per process, whether its model and its drafter are MoE models
    (``vllm_ascend.utils``' ``_IS_MOE_MODEL``, ``_IS_DRAFTER_MOE_MODEL``: a server process serves one
    model); a process that serves one scenario after another, of other drafters, asks afresh for each."""
    utils = import_ascend("vllm_ascend.utils")
    for name in ("_IS_MOE_MODEL", "_IS_DRAFTER_MOE_MODEL"):
        if hasattr(utils, name):
            setattr(utils, name, None)


def single_rank_world(vllm_config) -> None:
    """vLLM's parallel state for one rank (gloo): ``set_ascend_forward_context`` asks the TP group its size."""
    state = import_ascend("vllm.distributed.parallel_state")
    if state._TP is not None:
        return
    config = import_ascend("vllm.config")
    init = f"file://{scratch('gloo')}/rendezvous"
    with config.set_current_vllm_config(vllm_config):
        state.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=init, local_rank=0, backend="gloo"
        )
        state.ensure_model_parallel_initialized(1, 1)
