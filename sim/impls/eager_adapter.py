"""What every adapter around another project's proposer shares: ``MtpProposer``'s face, eager only.

The serving simulation and the gate build a proposer as ``cls(cfg, model,
device, ops=, mode=)``, switch its trace on with ``record``, read
``logits_calls``, ``graphs`` and the dtype of ``hidden_states``, and move drafts
to the host with ``drafts_to_host``. An adapter subclasses ``EagerAdapter``
and writes ``propose``; graph modes are refused at construction, since the
other projects' graphs (CUDA, ACL) cannot be captured on a CPU run.
"""

from __future__ import annotations

import torch

from mtp.config import ProposerConfig


class EagerAdapter:
    """``MtpProposer``'s constructor, trace and host copy, for a proposer that runs eagerly only.

    ``ops`` is accepted for the signature and unused: the adapted proposer
    prepares its own inputs, as its runner does.
    """

    label = "this adapter"
    graphs_need = "an accelerator"

    def __init__(self, cfg: ProposerConfig, model, device, ops=None, mode="eager"):
        if str(getattr(mode, "value", mode)) != "eager":
            raise ValueError(f"mode={mode!r}: {self.label} runs eagerly only (its graphs need {self.graphs_need})")
        if model.hidden_size != cfg.hidden_size:
            raise ValueError(f"model.hidden_size={model.hidden_size!r}: config says {cfg.hidden_size}")
        self.cfg, self.device, self.ops = cfg, device, ops
        self.graphs: dict = {}
        self.trace = None
        self.logits_calls = 0
        self.hidden_states = torch.zeros(0, cfg.hidden_size, dtype=torch.float32)  # its dtype is read by sim.serving

    def record(self, on: bool = True) -> None:
        self.trace = [] if on else None

    def drafts_to_host(self, drafts: torch.Tensor) -> list[list[int]]:
        return drafts.cpu().tolist()

    def capture_all(self) -> None:
        """Nothing to capture: eager only."""

    def dummy_run(self, size: int) -> None:
        raise NotImplementedError(f"{self.label} has no dummy run (eager only)")
