"""``cuda`` and ``npu``: one implementation over ``torch.cuda`` / ``torch.npu``.

NPUGraph mirrors CUDAGraph (capture_begin/end, replay, pools, the
``graph(...)`` context), so both backends share this code and differ only in
the torch module they reach. torch_npu is imported only when the npu device is
asked for. Without CANN its import fails (``libhccl.so`` missing); once
installed, torch's backend autoload would import it from ``import torch``
itself, so ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` is set before that (conftest.py
and ``python -m sim`` do it first thing).
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager

import torch

from devices.base import DeviceUnavailable, GraphError
from devices.sync_watch import watch_host_syncs


class AcceleratorGraph:
    """A torch device graph with the replay checks of the simulator."""

    def __init__(self, graph, size: int, inputs: dict[str, torch.Tensor] | None, params: dict[str, torch.Tensor]):
        self.graph, self.size = graph, size
        self.inputs = {name: t.data_ptr() for name, t in (inputs or {}).items()}
        self.params = params

    def replay(self, size: int, inputs: dict[str, torch.Tensor] | None = None) -> None:
        if size != self.size:
            raise GraphError(f"replay at size {size}, but this graph was captured at size {self.size}")
        for name, t in (inputs or {}).items():
            if t.data_ptr() != self.inputs.get(name):
                raise GraphError(f"input '{name}' moved since capture")
        self.graph.replay()

    def update_params(self, **values) -> None:
        for name, vals in values.items():
            if name not in self.params:
                raise GraphError(f"no host parameter named {name!r} in this graph")
            self.params[name][: len(vals)].copy_(torch.tensor(vals, dtype=torch.int64))


class AcceleratorDevice:
    """A torch accelerator reached through ``torch.<kind>``."""

    kind: str
    supports_graphs = True
    supports_param_update = True

    def __init__(self) -> None:
        self.module = self._load_module()
        if not self.module.is_available():
            raise DeviceUnavailable(self.kind, f"torch.{self.kind}.is_available() is False on this machine")
        self.torch_device = torch.device(self.kind, self.module.current_device())
        self.max_ranks = self.module.device_count()  # one device per PCP rank
        self._capture_params: dict[str, torch.Tensor] | None = None

    @property
    def name(self) -> str:
        return self.kind

    def _load_module(self):
        return getattr(torch, self.kind)

    def describe(self) -> str:
        return f"{self.kind} ({self.module.get_device_name(self.torch_device)}, torch {torch.__version__})"

    def synchronize(self) -> None:
        self.module.synchronize()

    def pinned(self, shape, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, pin_memory=True)

    def to_host(self, src: torch.Tensor, out: torch.Tensor, non_blocking: bool = False):
        out.copy_(src, non_blocking=non_blocking)
        event = self.module.Event()
        event.record()
        return event

    def graph_pool(self):
        return self.module.graph_pool_handle()

    @contextmanager
    def capture(self, size: int, pool=None, inputs: dict[str, torch.Tensor] | None = None):
        graph_cls = getattr(self.module, "CUDAGraph", None) or self.module.NPUGraph
        graph = graph_cls()
        params: dict[str, torch.Tensor] = {}
        self._capture_params = params
        try:
            with self.module.graph(graph, pool=pool):
                yield AcceleratorGraph(graph, size, inputs, params)
        finally:
            self._capture_params = None

    def host_param(self, name: str, values: list[int]) -> torch.Tensor:
        """Inside a capture the copy reads a pinned buffer at every replay, which ``update_params`` rewrites."""
        host = self.pinned((len(values),), torch.int64)
        host.copy_(torch.tensor(values, dtype=torch.int64))
        if self._capture_params is not None:
            self._capture_params[name] = host
        return host.to(self.torch_device, non_blocking=True)

    def watch_host_syncs(self, forbid: str | None = None):
        return watch_host_syncs(forbid)


class CudaDevice(AcceleratorDevice):
    kind = "cuda"


class NpuDevice(AcceleratorDevice):
    kind = "npu"

    def _load_module(self):
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        try:
            importlib.import_module("torch_npu")
        except Exception as exc:  # ImportError, or OSError from a missing CANN library
            raise DeviceUnavailable("npu", f"import torch_npu failed: {type(exc).__name__}: {exc}") from exc
        return torch.npu
