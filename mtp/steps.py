"""Step 4: the metadata of draft steps j = 2..K, one token per request.

A draft at position ``p`` attends to exactly the accepted prefix plus the
earlier drafts: ``seq_len = accepted_seq_len + j - 1 = p + 1``. Its slot comes
from the block table, never from the previous slot + 1 (that crosses block
boundaries into another request's block). A position at or past
``max_model_len`` is sent to 0 (for RoPE), attends to one token, and writes no
KV: that draft is garbage and the runner ignores it.
"""

from __future__ import annotations

import torch

from mtp.batch import StepMeta
from mtp.prepare import PADDING_SLOT


def advance_step(
    base_positions: torch.Tensor,
    accepted_seq_lens: torch.Tensor,
    step: int | torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    max_model_len: int,
) -> StepMeta:
    """Metadata of draft step ``step`` (2-based) for every request; no host sync.

    ``step`` may be a device tensor of one element, so that a captured graph
    reads it at replay instead of baking in the value it had at capture.

    base_positions:    int64 [B], position of each request's last accepted token.
    accepted_seq_lens: int32 [B], ``seq_len - n_rejected``.
    """
    raw = base_positions + (step - 1)
    overflow = raw >= max_model_len
    positions = torch.where(overflow, torch.zeros_like(raw), raw)
    seq_lens = torch.where(overflow, torch.ones_like(accepted_seq_lens), accepted_seq_lens + (step - 1))
    blocks = block_table.gather(1, (positions // block_size).unsqueeze(1)).squeeze(1).to(torch.int64)
    slots = blocks * block_size + positions % block_size
    slots = torch.where(overflow, torch.full_like(slots, PADDING_SLOT), slots)
    return StepMeta(positions=positions, seq_lens=seq_lens.to(torch.int32), slot_mapping=slots)
