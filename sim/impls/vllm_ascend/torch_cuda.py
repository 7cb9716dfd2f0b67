"""torch.cuda as vllm-ascend's runner leaves it: its ``__init__`` runs inside the runner module's
``_torch_cuda_wrapper``, whose ``finally`` points torch.cuda's current stream and stream context at
torch.npu's and leaves its ``Event`` a placeholder, for the rest of the process. vLLM code the runner
inherits runs on them: its asynchronous output's copy, and, on releases/v0.18.0, the valid-count copy of
``_copy_valid_sampled_token_count``. ``as_the_runner_left_it`` puts them in force around a call of the
runner (the process's own back after it).
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace

import torch

from sim.impls.kit.ascend import runner_source

LEFT_BY_THE_RUNNER = (("cuda", "Event"), ("cuda", "current_stream"), ("cuda", "stream"), (None, "Event"))


def cuda_as_the_runner_leaves_it() -> dict:
    """What the runner's ``_torch_cuda_wrapper`` (compiled from the checkout), entered and left as its
    ``__init__`` does, leaves torch.cuda's event class, current stream and stream context and torch's
    ``Event`` (``LEFT_BY_THE_RUNNER``): vLLM's asynchronous output copies the sampled tokens to the host
    on them and waits for its event before reading them. Run on a stand-in ``torch`` whose ``npu`` is the
    fake's streams and events (its memory query, which the wrapper only assigns, is never read), so
    nothing of the process changes here."""
    stand_in, wrapper = _runner_wrapper()
    run = wrapper()
    next(run)
    run.close()  # its finally: what a runner leaves after its __init__
    return {(ns, name): getattr(_namespace(stand_in, ns), name) for ns, name in LEFT_BY_THE_RUNNER}


@functools.cache
def _runner_wrapper():
    """The stand-in ``torch`` and the runner's ``_torch_cuda_wrapper`` compiled over it (once)."""
    npu = SimpleNamespace(
        **{name: getattr(torch.npu, name) for name in ("Event", "Stream", "current_stream", "stream", "synchronize")},
        is_current_stream_capturing=torch.npu.is_current_stream_capturing,
        default_stream=torch.npu.current_stream,  # the fake's only stream outside a stream context
        mem_get_info=None,
    )
    stand_in = SimpleNamespace(cuda=SimpleNamespace(Stream=torch.cuda.Stream), npu=npu, Event=torch.Event)
    return stand_in, runner_source.module_function("_torch_cuda_wrapper", torch=stand_in)


def _namespace(root, ns: str | None):
    return root if ns is None else getattr(root, ns)


@contextlib.contextmanager
def as_the_runner_left_it():
    """``cuda_as_the_runner_leaves_it`` in force for one call (the process's own back after it)."""
    left = cuda_as_the_runner_leaves_it()
    saved = {(ns, name): getattr(_namespace(torch, ns), name) for ns, name in left}
    for (ns, name), value in left.items():
        setattr(_namespace(torch, ns), name, value)
    try:
        yield
    finally:
        for (ns, name), value in saved.items():
            setattr(_namespace(torch, ns), name, value)
