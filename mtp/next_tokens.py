"""Step 1: the token each request continues from, and its valid sample count.

A sampled id is valid when ``0 <= id < vocab_size`` (-1 is the placeholder of
the padded form). The next token is the last valid sampled id; a request with
none, or whose sample is discarded (partial prefill), continues from its own
token at ``seq_len`` (the backup).
"""

from __future__ import annotations

import numpy as np
import torch

from mtp.batch import NextTokens, SampledTokens


def host_valid_counts(sampled: SampledTokens) -> np.ndarray:
    """Unpadded mode: valid sampled ids per request (0 where discarded), int64 [B] host."""
    return np.array([0 if d else len(ids) for ids, d in zip(sampled.lists, sampled.discarded)], dtype=np.int64)


def next_tokens_host(sampled: SampledTokens, device: torch.device) -> NextTokens:
    """Unpadded mode: per-request host lists of valid sampled ids."""
    counts = host_valid_counts(sampled).astype(np.int32)
    last = np.array([ids[-1] if len(ids) else -1 for ids in sampled.lists], dtype=np.int64)
    next_ids = np.where(counts > 0, last, sampled.backup).astype(np.int32)
    return NextTokens(
        next_token_ids=torch.from_numpy(next_ids).to(device),
        valid_counts=torch.from_numpy(counts).to(device),
    )


def next_tokens_padded(sampled: SampledTokens, vocab_size: int, device: torch.device) -> NextTokens:
    """Padded mode: [B, K+1] device ids with -1 placeholders, with no host sync.

    Host inputs (discard mask, backup ids) only travel host -> device.
    """
    ids = sampled.padded
    discarded = torch.from_numpy(np.asarray(sampled.discarded, dtype=bool)).to(device, non_blocking=True)
    backup = torch.from_numpy(np.asarray(sampled.backup, dtype=np.int32)).to(device, non_blocking=True)
    valid = (ids >= 0) & (ids < vocab_size) & ~discarded[:, None]
    counts = valid.sum(dim=1, dtype=torch.int32)
    # Rightmost valid column (-1 if none): argmax of col+1 over valid columns.
    cols = torch.arange(1, ids.shape[1] + 1, device=ids.device)
    last_col = (valid * cols).amax(dim=1) - 1
    picked = ids.gather(1, last_col.clamp(min=0).unsqueeze(1)).squeeze(1)
    next_ids = torch.where(last_col >= 0, picked.to(torch.int32), backup)
    return NextTokens(next_token_ids=next_ids, valid_counts=counts)
