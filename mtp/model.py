"""The interface between the proposer and a draft model.

Any MTP layer that reads and writes a paged KV cache fits: the simulator's
tiny model, a vLLM model wrapped by an adapter, an NPU model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class AttentionMeta:
    """What attention needs for one forward over N rows of B requests.

    query_start_loc: int32 [B+1] device; request r owns rows qsl[r]..qsl[r+1]-1.
    seq_lens:        int32 [B] device; the query rows of request r are the
                     last rows of its first seq_len[r] positions, and attend
                     causally to that prefix (read through the block table).
    block_table:     int32 [B, max_blocks] device.
    slot_mapping:    int64 [N] device; where each row writes its K/V, -1: nowhere.
    seq_len_bound:   int64 [1] device, an upper bound of ``seq_lens`` that the
                     host provides (NPU attention kernels take their lengths
                     from the host). Keys at or past it are not read, so a
                     bound that does not advance with the positions loses KV.
                     In a captured graph it is a host parameter: frozen at
                     capture unless updated before each replay.
    kv_gather:       under prefill context parallel, all-gathers rows over the
                     PCP group (rank-major), so every rank writes the K/V of
                     every rank's rows and attends over the whole sequence;
                     None on a single rank.
    sequence_parallel: under shared-expert data parallel, positions and hidden
                     states arrive as this rank's chunk of the rows, and the
                     model returns its chunk of the output (``SequenceParallel``);
                     None otherwise.
    own_rows_only:   the kernel is handed no cached context: each request's query
                     rows attend causally to that request's rows of this forward
                     alone, not to the prefix before them (vllm-ascend's FIA
                     kernels in the ``PrefillNoCache`` state). Right only where no
                     request has context; elsewhere it loses the prefix.
    """

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    seq_len_bound: torch.Tensor
    kv_gather: Callable[[torch.Tensor], torch.Tensor] | None = None
    sequence_parallel: SequenceParallel | None = None
    own_rows_only: bool = False


@dataclass
class SequenceParallel:
    """N rows split over a group of ``size`` ranks: padded to a multiple of ``size``, rank r
    holding chunk r. ``all_gather`` concatenates every rank's rows, rank 0's first."""

    rows: int
    rank: int
    size: int
    all_gather: Callable[[torch.Tensor], torch.Tensor]

    @property
    def chunk(self) -> int:
        return -(-self.rows // self.size)

    def shard(self, x: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """This rank's chunk of ``x``'s rows along ``dim`` (zero rows pad the last chunks)."""
        x = x.movedim(dim, 0)
        pad = self.chunk * self.size - x.shape[0]
        if pad:
            x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
        return x[self.rank * self.chunk : (self.rank + 1) * self.chunk].movedim(0, dim)

    def gather(self, x: torch.Tensor, dim: int = 0) -> torch.Tensor:
        """Every rank's chunk along ``dim``, concatenated, the padding cut off: the N rows."""
        whole = self.all_gather(x.movedim(dim, 0).contiguous())
        return whole[: self.rows].movedim(0, dim)


class DraftModel(Protocol):
    """An MTP draft layer with a paged KV cache."""

    hidden_size: int
    vocab_size: int

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor, attn: AttentionMeta
    ) -> torch.Tensor:
        """int32 [N] ids, int64 [N] positions ([3, N] under M-RoPE), float32 [N, H] hidden -> [N, H]
        hidden; writes K/V at ``attn.slot_mapping``."""

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[M, H] -> [M, V]."""
