"""``EagerDevice``: the smallest ``Device`` the core needs in eager mode, on any torch device.

For a user of the core alone (``MtpProposer(cfg, model, EagerDevice("cuda:0"))``):
plain torch, no graphs. Eager mode reads, of the ``Device`` protocol:

- ``torch_device``: where the proposer's buffers live;
- ``host_param``: the host-side seq_len bound handed to attention (eagerly, a
  plain device tensor);
- ``pinned`` and ``to_host`` with an event: ``drafts_to_host``'s copy;
- ``name``, ``supports_graphs`` (False: any graph mode is refused at
  construction) and ``supports_param_update``.

The rest of the protocol is here so the object is a ``Device`` everywhere
(``describe``, ``synchronize``, ``watch_host_syncs``); ``capture`` and
``graph_pool`` refuse with ``GraphError``. It is not as strict as ``sim``:
check a proposer on ``sim``, run it with this.
"""

from __future__ import annotations

import torch

from devices.base import GraphError
from devices.sync_watch import watch_host_syncs


class _Done:
    """An event for work that is already done (or ordered by the stream)."""

    def __init__(self, device: torch.device):
        self.device = device

    def synchronize(self) -> None:
        if self.device.type != "cpu":
            getattr(torch, self.device.type).synchronize(self.device)


class EagerDevice:
    """Plain torch on ``torch_device`` (default CPU), eager only."""

    supports_graphs = False
    supports_param_update = False
    max_ranks = 1

    def __init__(self, torch_device: torch.device | str = "cpu"):
        self.torch_device = torch.device(torch_device)
        self.name = f"eager-{self.torch_device.type}"

    def describe(self) -> str:
        return f"{self.name} (plain torch on {self.torch_device}, eager only, torch {torch.__version__})"

    def synchronize(self) -> None:
        _Done(self.torch_device).synchronize()

    def pinned(self, shape, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, pin_memory=self.torch_device.type != "cpu")

    def to_host(self, src: torch.Tensor, out: torch.Tensor, non_blocking: bool = False) -> _Done:
        out.copy_(src, non_blocking=non_blocking)
        return _Done(self.torch_device)

    def graph_pool(self):
        raise GraphError(f"{self.name} captures no graphs: use mode='eager'")

    def capture(self, size: int, pool=None, inputs=None):
        raise GraphError(f"{self.name} captures no graphs: use mode='eager'")

    def host_param(self, name: str, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.torch_device)

    def watch_host_syncs(self, forbid: str | None = None):
        return watch_host_syncs(forbid)
