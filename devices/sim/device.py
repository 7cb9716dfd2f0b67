"""``sim``: the proposer on CPU torch, with every host sync visible."""

from __future__ import annotations

import torch

from devices.sync_watch import watch_host_syncs


class SimDevice:
    """CPU device that counts the syncs an accelerator would pay for."""

    name = "sim"

    def __init__(self, intra_op_threads: int = 1) -> None:
        self.torch_device = torch.device("cpu")
        # The simulator's tensors are tiny: one intra-op thread is the fastest
        # (no fork/join per op) and gives run-to-run identical float results.
        torch.set_num_threads(intra_op_threads)

    def synchronize(self) -> None:
        pass

    def watch_host_syncs(self, forbid: str | None = None):
        return watch_host_syncs(forbid)

    def describe(self) -> str:
        return f"sim (CPU reference simulator, torch {torch.__version__})"
