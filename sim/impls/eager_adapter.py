"""What every adapter around another project's proposer shares: ``MtpProposer``'s face, eager only.

The serving simulation and the gate build a proposer as ``cls(cfg, model,
device, ops=, mode=)``, switch its trace on with ``record``, read
``logits_calls``, ``graphs`` and the dtype of ``hidden_states``, and move drafts
to the host with ``drafts_to_host``. An adapter subclasses ``EagerAdapter``
and writes ``propose``; graph modes are refused at construction, since the
other projects' graphs (CUDA, ACL) cannot be captured on a CPU run.

An adapter shares one upstream proposer between runs (building one costs
seconds); ``remember_fresh`` records its tensors as built and ``start_fresh``
puts them back, so each run starts from a new proposer's state. A buffer row
the upstream code reads before it writes it (``stale-last-row``) would
otherwise hold an earlier run's token id, which may lie past this run's vocabulary.
"""

from __future__ import annotations

import torch

from mtp.config import ProposerConfig

_FRESH = "_mtp_harness_fresh_state"


def _tensors(proposer):
    """(name, tensor) for every tensor the proposer holds itself or in a host/device buffer pair
    (vLLM's ``CpuGpuBuffer``: ``.cpu`` and ``.gpu``)."""
    for name, value in vars(proposer).items():
        if isinstance(value, torch.Tensor):
            yield name, value
        elif isinstance(getattr(value, "cpu", None), torch.Tensor) and isinstance(
            getattr(value, "gpu", None), torch.Tensor
        ):
            yield f"{name}.cpu", value.cpu
            yield f"{name}.gpu", value.gpu


def remember_fresh(proposer):
    """Record copies of ``proposer``'s tensors as built, for ``start_fresh``; returns the proposer."""
    vars(proposer)[_FRESH] = {name: t.detach().clone() for name, t in _tensors(proposer)}
    return proposer


def start_fresh(proposer) -> None:
    """Put back, in place, every tensor ``proposer`` held when ``remember_fresh`` saw it built
    (in place: views and aliases of the buffers stay valid)."""
    fresh = vars(proposer)[_FRESH]
    for name, t in _tensors(proposer):
        if name in fresh and t.shape == fresh[name].shape:
            t.copy_(fresh[name])


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
