"""Deliberately broken shared-expert DP proposers: each must fail tests/properties/test_tp.py."""

from __future__ import annotations

import torch

from mtp.model import SequenceParallel
from mtp.proposer import MtpProposer
from mtp.shared_expert_dp import SharedExpertDpProposer


class _LastRankFirst(SequenceParallel):
    def gather(self, x, dim=0):
        parts = self.all_gather(x.movedim(dim, 0).contiguous()).chunk(self.size)
        return torch.cat(parts[::-1])[: self.rows].movedim(0, dim)


class ChunksGatheredLastRankFirst(SharedExpertDpProposer):
    """The chunks put back last rank first: rows land on other requests' positions."""

    def split(self, rows):
        return _LastRankFirst(rows, self.group_rank, self.group_size, self.gather)


class _Interleaved(SequenceParallel):
    def shard(self, x, dim=0):
        x = x.movedim(dim, 0)
        pad = self.chunk * self.size - x.shape[0]
        x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
        return x[self.rank :: self.size].movedim(0, dim)


class RowsInterleaved(SharedExpertDpProposer):
    """Rank r keeps rows r, r + T, ... but the gather concatenates chunks: the rows come back permuted."""

    def split(self, rows):
        return _Interleaved(rows, self.group_rank, self.group_size, self.gather)


class _Summed(SequenceParallel):
    def shard(self, x, dim=0):
        return super().shard(x, dim) * self.size


class ReduceScatteredLikeTheSeed(SharedExpertDpProposer):
    """The 0.13-era proposer's ``maybe_pad_and_reduce`` taken literally: a reduce-scatter sums every rank's whole
    copy of the positions and hidden states, so each rank holds T times its chunk."""

    def split(self, rows):
        return _Summed(rows, self.group_rank, self.group_size, self.gather)


class _Unpadded(SequenceParallel):
    def shard(self, x, dim=0):
        x = x.movedim(dim, 0)
        return x[self.rank * self.chunk : (self.rank + 1) * self.chunk].movedim(0, dim)


class ChunkUnpaddedOnRank1(SharedExpertDpProposer):
    """Rank 1 does not pad its chunk: with a row count the group size does not divide, it sends fewer
    rows than rank 0 (a hang on HCCL/NCCL)."""

    def split(self, rows):
        cls = _Unpadded if self.group_rank == 1 else SequenceParallel
        return cls(rows, self.group_rank, self.group_size, self.gather)


class SplitSkippedInDummyRunOnRank1(SharedExpertDpProposer):
    """Rank 1 runs its dummy runs (graph capture) without the split: it issues fewer collectives than
    rank 0 (on HCCL/NCCL, a hang at capture)."""

    _dummy = False

    def dummy_run(self, size):
        self._dummy = True
        try:
            super().dummy_run(size)
        finally:
            self._dummy = False

    def model_forward(self, *args):
        if self.group_rank == 1 and self._dummy:
            return MtpProposer.model_forward(self, *args)
        return super().model_forward(*args)
