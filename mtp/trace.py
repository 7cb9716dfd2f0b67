"""A record of what each draft step handed the model, for checking metadata."""

from __future__ import annotations

from dataclasses import dataclass

import torch


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

    @classmethod
    def capture(cls, step: int, seq_len_bound: int, rows: int, **tensors: torch.Tensor) -> StepRecord:
        copies = {k: v.detach().clone() for k, v in tensors.items()}
        return cls(step=step, seq_len_bound=seq_len_bound, rows=rows, **copies)
