"""What every adapter around another project's proposer shares: ``MtpProposer``'s face, eager only.

The serving simulation and the gate build a proposer as ``cls(cfg, model,
device, ops=, mode=)`` (an adapter takes ``ops`` for that signature and drops it: the adapted
proposer prepares its own inputs, as its runner does) and read it through ``mtp.trace.ProposerUnderTest``
(its trace, captured sizes and hidden dtype; the tests also read
``logits_calls``), moving drafts to the host with ``drafts_to_host``. An adapter
subclasses ``EagerAdapter``, sets ``self.model`` (its recording draft model) and
writes ``_propose``, the generation's own call; ``propose`` is the template every
adapter runs (validation, the trace, logit counting, the drafts' dtype and shape).
Graph modes are refused at construction, since the other projects' graphs (CUDA,
ACL) cannot be captured on a CPU run; the vllm-ascend adapter alone takes over full-graph
mode itself (its ACL graphs on the simulator's recorder, ``sim.impls.kit.ascend.fake_npu_graphs``). Part of the adapter kit (``sim.impls.kit``).
"""

from __future__ import annotations

import torch

from mtp.batch import SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.trace import Phase
from mtp.validate import validate_batch, validate_sampled


class EagerAdapter:
    """``MtpProposer``'s constructor, trace and host copy, for a proposer that runs eagerly only."""

    label = "this adapter"
    graphs_need = "an accelerator"

    def __init__(self, cfg: ProposerConfig, model, device, mode="eager"):
        if str(getattr(mode, "value", mode)) != "eager":
            raise ValueError(f"mode={mode!r}: {self.label} runs eagerly only (its graphs need {self.graphs_need})")
        if model.hidden_size != cfg.hidden_size:
            raise ValueError(f"model.hidden_size={model.hidden_size!r}: config says {cfg.hidden_size}")
        self.cfg, self.device = cfg, device
        self.trace = None
        self.logits_calls = 0

    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """Draft tokens, int64 [B, K]: the core's validation first (a malformed call is refused before
        anything is written), the trace cleared and handed to the draft model, the generation's
        ``_propose``, then the K logits calls counted."""
        validate_batch(batch, self.cfg)
        validate_sampled(sampled, batch, self.cfg)
        k = self.cfg.num_spec_tokens
        if self.trace is not None:
            self.trace.clear()
        self.model.trace, self.model.calls = self.trace, 0
        drafts = self._propose(batch, sampled, k)
        self.logits_calls += k
        return drafts.to(torch.int64).view(batch.num_reqs, k).clone()

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """The upstream proposer's drafts for one call (any integer dtype, B * K values)."""
        raise NotImplementedError(f"{self.label} has no _propose")

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
