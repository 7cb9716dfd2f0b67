"""What a proposer shows the checks: the phases, a record of each model call, and the protocol.

``ProposerUnderTest`` is everything the serving simulation and the oracle may
read of a proposer besides its drafts: the trace of model calls, the sizes it
captured graphs at per phase, and the dtype of its hidden states (which sets
the margin under which two draft tokens count as a tie). The core and every
adapter provide it; nothing else of a proposer's internals is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

import torch


class Phase(str, Enum):
    """The two kinds of model call in a propose call, each captured per size in graph modes."""

    FIRST = "first"  # the first pass over every kept token row (docs/DESIGN.md, step 3)
    STEP = "step"  # draft steps 2..K, one row per request (step 4)

    def __str__(self) -> str:
        return self.value  # messages name the phase as it is spelled, on every Python


@dataclass
class StepRecord:
    """One model call. Tensors are detached device copies, read only by tests.

    step: 1 for the first pass, j for draft step j.
    """

    step: int
    input_ids: torch.Tensor
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    sample_indices: torch.Tensor
    padding_slots: torch.Tensor  # slots of the graph-padding rows: all must be -1
    seq_len_bound: int  # the host-side bound the attention was given
    rows: int  # rows the model ran at (graph-padded)
    mrope_positions: torch.Tensor | None = None  # [3, n] under M-RoPE, else None
    # the host count of each request's tokens before its query, where the implementation hands its
    # attention one (vllm-ascend's num_computed_tokens_cpu), else None
    num_computed_tokens: torch.Tensor | None = None
    # the positions the attention rotated each row at, where its metadata carries the rotation (MLA's
    # cos and sin), else None (the rows' positions rotate)
    rope_positions: torch.Tensor | None = None

    @classmethod
    def capture(cls, step: int, seq_len_bound: int, rows: int, **tensors: torch.Tensor) -> StepRecord:
        """Copies of ``tensors`` (None: a field the implementation does not hand); anything else but a
        tensor (a stand-in object, say) is refused by name, so every value the checks compare was
        computed as a tensor by the code under test."""
        for name, value in tensors.items():
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"{name}: a {type(value).__name__}, not a tensor")
        copies = {k: v.detach().clone() for k, v in tensors.items() if v is not None}
        return cls(step=step, seq_len_bound=seq_len_bound, rows=rows, **copies)


@runtime_checkable
class ProposerUnderTest(Protocol):
    """What the checks read of a proposer: ``MtpProposer`` and every adapter provide it."""

    trace: list[StepRecord] | None  # with ``record(True)``: one record per model call of the last propose call

    def record(self, on: bool = True) -> None: ...

    def propose(self, batch, sampled) -> torch.Tensor: ...

    def drafts_to_host(self, drafts: torch.Tensor) -> list[list[int]]: ...

    def captured_sizes(self) -> dict[Phase, list[int]]:
        """Per phase, the sizes graphs were captured at, ascending (empty lists when eager)."""
        ...

    @property
    def hidden_dtype(self) -> torch.dtype:
        """The dtype of the hidden states the draft model is fed."""
        ...
