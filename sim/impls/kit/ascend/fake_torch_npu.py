"""A stand-in ``torch_npu`` so that vllm-ascend imports on a machine without CANN.

vllm-ascend's own CPU unit tests (``tests/ut/conftest.py``) do the same: a
module object whose NPU entry points are mocks. No value the gate compares
comes from a mock (``stand_ins_watched``, around every test while the fake is installed: tests/checks/stand_ins.py): the
spec-decode path computes with plain torch on CPU tensors. An NPU kernel reached through the fake
raises ``NotImplementedError`` naming it, so a code path that would need the real library fails
loudly; one kernel is written here in torch, ``npu_top_k_top_p`` (``top_k_top_p``: each row's top-k,
then its top-p over what the top-k kept, vLLM's order, as the kernel is documented), which
vllm-ascend's samplers call on A2/A3 for requests with top-k or top-p (v0.22.1rc's as its own
``_C_ascend.npu_apply_top_k_top_p``, the same semantics): the draws of such requests are that
function's masking of the checkout's candidates.

The graph API (``torch.npu.NPUGraph``, ``torch.npu.graph``, the graph-task update calls,
streams and events) is not a mock: ``fake_npu_graphs`` backs it with the simulator's graph
recorder, so vllm-ascend's ``ACLGraphWrapper`` and ``update_full_graph_params`` run on CPU.

``install()`` does nothing when the real ``torch_npu`` imports (an NPU
runner): the same adapter then runs on the real library.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import types
from unittest.mock import MagicMock, NonCallableMock, patch

from sim.impls.kit.ascend import fake_npu_graphs

# triton-ascend ops that vllm-ascend resolves at import time (vllm_ascend/ops/triton/triton_utils.py)
TRITON_ASCEND_OPS = ("insert_slice", "extract_slice", "get_element")


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.util.spec_from_loader(name, loader=None)
    return mod


def _npu_kernel(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"torch_npu.{name} is an NPU kernel; the fake torch_npu (no CANN here) has none")

    missing.__name__ = name
    return missing


def top_k_top_p(logits, k=None, p=None):
    """``torch_npu.npu_top_k_top_p`` on CPU: ``logits`` [B, V] with each row's ids outside its top ``k[b]``
    (a k of V or more keeps all), then outside the smallest set whose probability (after the top-k)
    reaches ``p[b]``, set to -inf; the row's best id always kept."""
    import torch

    ranked, order = logits.sort(dim=-1, descending=True)
    position = torch.arange(logits.shape[-1], device=logits.device).expand_as(ranked)
    dropped = torch.zeros_like(ranked, dtype=torch.bool)
    if k is not None:
        dropped |= position >= k.to(torch.long).unsqueeze(-1)
    if p is not None:
        probs = ranked.masked_fill(dropped, float("-inf")).softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # the mass of the better ids
        dropped |= (before >= p.unsqueeze(-1)) & (position > 0)
    return logits.scatter(-1, order, ranked.masked_fill(dropped, float("-inf")))


def real_torch_npu_importable() -> str | None:
    """None if the real ``torch_npu`` imports, else the reason it does not."""
    if is_installed():
        return "the fake torch_npu is installed"
    try:
        importlib.import_module("torch_npu")
    except Exception as exc:  # noqa: BLE001 - any failure means "not here"; name it
        sys.modules.pop("torch_npu", None)
        return f"{type(exc).__name__}: {exc}"
    return None


def _fake_torch_npu() -> types.ModuleType:
    npu = _module("torch_npu")
    npu.__path__ = []
    npu._fake = True
    npu.npu = MagicMock(name="torch_npu.npu")
    npu.npu.current_device.return_value = 0
    npu.npu.is_available.return_value = False
    npu.profiler = MagicMock(name="torch_npu.profiler")
    npu._C = MagicMock(name="torch_npu._C")
    npu._C._NPUTaskGroupHandle = fake_npu_graphs.TaskHandle
    npu._C._weak_ref_tensor = fake_npu_graphs.weak_ref_tensor
    npu._inductor = MagicMock(name="torch_npu._inductor")
    npu.npu_format_cast = lambda weight, fmt: weight
    npu.npu_top_k_top_p = top_k_top_p

    def __getattr__(name: str):  # any other NPU kernel: importable, fails when called
        if name.startswith("__"):
            raise AttributeError(name)
        return _npu_kernel(name)

    npu.__getattr__ = __getattr__
    return npu


def _fake_acl() -> tuple[types.ModuleType, types.ModuleType]:
    acl, rt = _module("acl"), _module("acl.rt")
    rt.memcpy = _npu_kernel("acl.rt.memcpy")
    acl.rt = rt
    return acl, rt


def interpreted_get_element(src, indices):
    """triton-ascend's ``get_element(tensor, (i, ...))`` (one element of a block, as a scalar) for
    Triton's interpreter, where a block is a numpy array: what vllm-ascend's rejection-sampling
    kernels use to walk their requests one at a time."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    index = tuple(int(np.asarray(i.handle.data).item()) if hasattr(i, "handle") else int(i) for i in indices)
    value = np.asarray(src.handle.data)[index]
    scalar = src.dtype.scalar
    return tl.tensor(TensorHandle(np.array([value], dtype=np.asarray(src.handle.data).dtype), scalar), scalar)


def _triton_ascend_extension() -> None:
    """``triton.language.extra.cann.extension`` with triton-ascend's extra ops.

    vllm-ascend resolves them when ``vllm_ascend.ops.triton`` is imported. Under Triton's
    interpreter ``get_element`` is ``interpreted_get_element``; ``insert_slice`` and
    ``extract_slice`` are stubs that raise inside a kernel (no kernel the gate launches uses them).
    """
    if "triton.language.extra.cann.extension" in sys.modules:
        return
    cann, ext = _module("triton.language.extra.cann"), _module("triton.language.extra.cann.extension")
    for name in TRITON_ASCEND_OPS:
        setattr(ext, name, _npu_kernel(f"triton-ascend {name}"))
    if os.environ.get("TRITON_INTERPRET") == "1":
        ext.get_element = interpreted_get_element
    cann.extension = ext
    sys.modules["triton.language.extra.cann"] = cann
    sys.modules["triton.language.extra.cann.extension"] = ext


@functools.cache
def register_device_hooks() -> None:
    """PrivateUse1 hooks for the renamed ``npu`` backend, saying no such device is here: what
    ``torch.distributed.barrier`` asks of the accelerator (``torch._C._get_accelerator``) before it
    picks the gloo group's CPU device. Registered where several ranks meet (``world``), once."""
    import torch

    class NoNpuHere(torch._C._acc.PrivateUse1Hooks):
        def is_available(self) -> bool:
            return False

        def has_primary_context(self, dev_id) -> bool:
            return False

        def is_built(self) -> bool:
            return False

    torch._C._acc.register_python_privateuseone_hook(NoNpuHere())


def is_installed() -> bool:
    """Whether the fake stands in for ``torch_npu`` in this process."""
    return getattr(sys.modules.get("torch_npu"), "_fake", False) is True


@contextlib.contextmanager
def stand_ins_watched():
    """The calls made on the fake's stand-ins, and the mocks made, inside the block (the list is filled at
    its end; empty where the fake is not installed: the real library has no stand-ins)."""
    touched: list[str] = []
    if not is_installed():
        yield touched
        return
    import torch

    npu = sys.modules["torch_npu"]
    roots = {
        "torch.npu": torch.npu,
        "torch_npu.npu": npu.npu,
        "torch_npu._C": npu._C,
        "torch_npu.profiler": npu.profiler,
        "torch_npu._inductor": npu._inductor,
    }
    for root in roots.values():
        root.reset_mock()
    made = []
    init = NonCallableMock.__init__

    def counting(self, *args, **kwargs):
        made.append(repr(kwargs.get("name") or type(self).__name__))
        init(self, *args, **kwargs)

    with patch.object(NonCallableMock, "__init__", counting):
        yield touched
    touched += [f"{name}{call}" for name, root in roots.items() for call in root.mock_calls]
    touched += [f"made {m}" for m in made]


def install() -> bool:
    """Install the fake (and the triton-ascend stubs) unless the real ``torch_npu`` imports.

    Must run before anything imports vllm. Returns True if the fake was installed.
    """
    if real_torch_npu_importable() is None:
        return False
    import torch

    npu = _fake_torch_npu()
    acl, rt = _fake_acl()
    sys.modules.update(
        {
            "torch_npu": npu,
            "torch_npu.npu": npu.npu,
            "torch_npu.npu.streams": npu.npu.streams,  # vllm-ascend 0.13 imports Event from it
            "torch_npu._C": npu._C,
            "torch_npu._C._distributed_c10d": npu._C._distributed_c10d,
            "torch_npu._inductor": npu._inductor,
            "acl": acl,
            "acl.rt": rt,
        }
    )
    try:
        torch.utils.rename_privateuse1_backend("npu")
    except RuntimeError:  # already renamed
        pass
    torch.npu = MagicMock(name="torch.npu")
    torch.npu.is_available.return_value = False
    torch.npu.current_device.return_value = 0
    # torch.manual_seed seeds the renamed backend's module too: the fake has no generator of its own (every
    # draw is the CPU generator's, which torch.manual_seed seeds), so seeding it is a plain no-op, not a mock.
    torch.npu._is_in_bad_fork = lambda: False
    torch.npu.manual_seed_all = lambda seed: None
    fake_npu_graphs.install_on(torch.npu, npu.npu)
    torch.version.cann = None
    _triton_ascend_extension()
    _sampler_op()
    _copy_and_expand_op()
    return True


_LIBRARIES = []  # the op libraries defined here, kept alive


def _copy_and_expand_op() -> None:
    """vllm-ascend's ``torch.ops._C_ascend.npu_copy_and_expand_eagle_inputs`` (its ``csrc``: an AscendC port of
    vLLM's ``copy_and_expand_eagle_inputs_kernel``), which a drafter that adds rows to its first pass (method
    ``draft_model``) calls: vLLM's Triton kernel, run in the interpreter (``copy_and_expand``), on the outputs
    the op allocates. A defect of the AscendC port alone is not seen here; the op's contract is."""
    import torch

    if hasattr(torch.ops._C_ascend, "npu_copy_and_expand_eagle_inputs"):
        return
    library = torch.library.Library("_C_ascend", "FRAGMENT")
    library.define(
        "npu_copy_and_expand_eagle_inputs(Tensor target_token_ids, Tensor target_positions, Tensor next_token_ids, "
        "Tensor query_start_loc, Tensor query_end_loc, int padding_token_id, int parallel_drafting_token_id, "
        "int num_padding_slots_per_request, bool shift_input_ids, int total_draft_tokens) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)"
    )
    library.impl("npu_copy_and_expand_eagle_inputs", copy_and_expand, "CPU")
    _LIBRARIES.append(library)


def copy_and_expand(
    target_token_ids,
    target_positions,
    next_token_ids,
    query_start_loc,
    query_end_loc,
    padding_token_id,
    parallel_drafting_token_id,
    num_padding_slots_per_request,
    shift_input_ids,
    total_draft_tokens,
):
    """The op's outputs as its binding allocates them (zeros: int32 ids, positions and indices, int8 masks),
    written by vLLM's ``copy_and_expand_eagle_inputs_kernel`` over the grid vLLM launches it on."""
    import torch

    try:
        from vllm.v1.spec_decode import utils
    except ImportError as exc:
        raise NotImplementedError(
            f"npu_copy_and_expand_eagle_inputs: this vLLM has no Triton kernel for it ({exc})"
        ) from exc
    num_reqs, total_input_tokens = query_start_loc.shape[0] - 1, target_token_ids.shape[0]
    out = [
        torch.zeros(total_draft_tokens, dtype=torch.int32),  # input ids
        torch.zeros(total_draft_tokens, dtype=torch.int32),  # positions
        torch.zeros(total_draft_tokens, dtype=torch.int8),  # rejected-token mask
        torch.zeros(total_draft_tokens, dtype=torch.int8),  # masked-token mask
        torch.zeros(num_reqs * num_padding_slots_per_request, dtype=torch.int32),  # tokens to sample
        torch.zeros(total_input_tokens, dtype=torch.int32),  # hidden-state mapping
    ]
    longest = int((query_start_loc[1:] - query_start_loc[:-1]).max()) + num_padding_slots_per_request
    block = min(256, utils.next_power_of_2(longest))
    utils.copy_and_expand_eagle_inputs_kernel[(num_reqs, -(-longest // block))](
        target_token_ids,
        target_positions,
        next_token_ids,
        *out,
        query_start_loc,
        query_end_loc,
        padding_token_id,
        parallel_drafting_token_id,
        total_input_tokens,
        num_padding_slots_per_request,
        shift_input_ids,
        BLOCK_SIZE_TOKENS=block,
    )
    return tuple(out)


def _sampler_op() -> None:
    """vllm-ascend's own ``torch.ops._C_ascend.npu_apply_top_k_top_p`` (its ``csrc``), which v0.22.1rc's
    sampler calls on A2/A3 where 0.23.0 calls ``torch_npu.npu_top_k_top_p``: ``top_k_top_p``, the
    semantics its op test holds it to (vLLM's top-k, then top-p over what the top-k kept)."""
    import torch

    if hasattr(torch.ops._C_ascend, "npu_apply_top_k_top_p"):
        return
    library = torch.library.Library("_C_ascend", "FRAGMENT")
    library.define("npu_apply_top_k_top_p(Tensor logits, Tensor? p=None, Tensor? k=None) -> Tensor")
    library.impl("npu_apply_top_k_top_p", lambda logits, p=None, k=None: top_k_top_p(logits, k, p), "CPU")
    _LIBRARIES.append(library)
