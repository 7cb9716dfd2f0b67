"""Step 6: how prefill context parallel (PCP) splits a batch over P ranks.

Each split (prefill) request is padded to a multiple of 2P and cut into 2P
equal chunks; rank i takes chunks i and 2P-1-i, so every rank gets one early
(cheap) and one late (expensive) chunk of causal attention. Requests not split
(decodes) are replicated on every rank. After the MTP forward the ranks'
rows are all-gathered (rank 0's rows, then rank 1's, ...) and
``restore_index`` puts them back in the batch's token order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD_ROW = -1


@dataclass
class PcpPlan:
    """The split of one batch.

    size:          P, the number of ranks.
    padded_lens:   int64 [B], each request's length on the ranks together
                   (a multiple of 2P if split, else its query length).
    rank_rows:     P arrays; rank i's rows as indices into the batch's
                   flattened tokens, ``PAD_ROW`` for padding.
    restore_index: int64 [T], for each batch token its row in the all-gather.
    """

    size: int
    padded_lens: np.ndarray
    rank_rows: list[np.ndarray]
    restore_index: np.ndarray

    @property
    def rows_per_rank(self) -> int:
        return len(self.rank_rows[0])


def pcp_split_plan(query_lens: np.ndarray, split: np.ndarray, size: int) -> PcpPlan:
    """Plan the split of requests with ``query_lens`` where ``split`` is True."""
    query_lens = np.asarray(query_lens, dtype=np.int64)
    split = np.asarray(split, dtype=bool)
    if size < 1:
        raise ValueError(f"pcp_size={size!r}: must be >= 1")
    if query_lens.shape != split.shape:
        raise ValueError(f"split.shape={split.shape}: expected {query_lens.shape}")
    chunks = 2 * size
    padded = np.where(split, -(-query_lens // chunks) * chunks, query_lens)
    starts = np.concatenate([[0], np.cumsum(query_lens)[:-1]])
    rank_rows = []
    for rank in range(size):
        rows = []
        for start, qlen, plen, is_split in zip(starts, query_lens, padded, split):
            local = np.arange(qlen) if not is_split else _rank_chunks(plen // chunks, rank, chunks)
            rows.append(np.where(local < qlen, start + local, PAD_ROW))
        rank_rows.append(np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64))
    restore = np.full(int(query_lens.sum()), -1, dtype=np.int64)
    for rank in reversed(range(size)):  # rank 0's copy of a replicated row wins
        rows = rank_rows[rank]
        owned = rows != PAD_ROW
        restore[rows[owned]] = rank * len(rows) + np.flatnonzero(owned)
    return PcpPlan(size=size, padded_lens=padded, rank_rows=rank_rows, restore_index=restore)


def _rank_chunks(chunk: int, rank: int, chunks: int) -> np.ndarray:
    head = np.arange(rank * chunk, (rank + 1) * chunk)
    tail = np.arange((chunks - 1 - rank) * chunk, (chunks - rank) * chunk)
    return np.concatenate([head, tail])
