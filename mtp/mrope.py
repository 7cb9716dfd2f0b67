"""M-RoPE positions of the draft steps (multimodal models, ``ProposerConfig.uses_mrope``).

A multimodal model rotates each token by three positions (temporal, height,
width): an image's tokens share a temporal row and spread over the other
two, text tokens carry the same value in all three, offset from the
sequence index by what the images before them saved. The KV cache is still
indexed by the sequence position, so slots, seq_lens and the
``max_model_len`` overflow keep coming from the [T] positions
(``mtp.steps``); only the rotation reads the [3, T] rows.

Drafts are text: draft step j advances all three rows of the request's
sample row by ``j - 1``. A draft whose sequence position overflows gets 0
in every row, as its scalar position does (its output is garbage and never
used; the rotation must only stay in range).
"""

from __future__ import annotations

import torch


def advance_mrope(
    base_mrope: torch.Tensor, base_positions: torch.Tensor, step: int | torch.Tensor, max_model_len: int
) -> torch.Tensor:
    """int64 [3, B]: the M-RoPE rows of draft step ``step`` (2-based); no host sync.

    base_mrope:     int64 [3, B], the rows of each request's sample row.
    base_positions: int64 [B], the sequence position of that row (decides overflow).
    """
    overflow = base_positions + (step - 1) >= max_model_len
    raw = base_mrope + (step - 1)
    return torch.where(overflow[None, :], torch.zeros_like(raw), raw)
