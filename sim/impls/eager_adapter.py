"""What every adapter around another project's proposer shares: ``MtpProposer``'s face, eager only.

The serving simulation and the gate build a proposer as ``cls(cfg, model,
device, ops=, mode=)`` and read it through ``mtp.trace.ProposerUnderTest``
(its trace, captured sizes and hidden dtype; the tests also read
``logits_calls``), moving drafts to the host with ``drafts_to_host``. An adapter subclasses ``EagerAdapter``
and writes ``propose``; graph modes are refused at construction, since the
other projects' graphs (CUDA, ACL) cannot be captured on a CPU run.
"""

from __future__ import annotations

import torch

from mtp.config import ProposerConfig
from mtp.trace import Phase


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
        self.trace = None
        self.logits_calls = 0

    hidden_dtype = torch.float32  # the tiny model's, fed to the adapted proposer as it is

    def captured_sizes(self) -> dict[Phase, list[int]]:
        return {phase: [] for phase in Phase}  # eager only

    def record(self, on: bool = True) -> None:
        self.trace = [] if on else None

    def drafts_to_host(self, drafts: torch.Tensor) -> list[list[int]]:
        if not isinstance(drafts, torch.Tensor):  # e.g. a fake torch_npu's stand-in, never a compared value
            raise TypeError(f"drafts: a {type(drafts).__name__}, not a tensor")
        return drafts.cpu().tolist()

    def capture_all(self) -> None:
        """Nothing to capture: eager only."""

    def dummy_run(self, size: int) -> None:
        raise NotImplementedError(f"{self.label} has no dummy run (eager only)")
