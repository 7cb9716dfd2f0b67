"""Deliberately broken lm-head TP proposers: each must fail tests/properties/test_tp.py."""

from __future__ import annotations

import torch

from mtp.pcp_tp import PcpLmHeadTpProposer
from mtp.tp import LmHeadTpProposer


class ShardsInRankOrderReversed(LmHeadTpProposer):
    """The vocabulary slices joined last rank first: token ids point into the wrong slice."""

    def join(self, slices: torch.Tensor) -> torch.Tensor:
        return super().join(slices.flip(0))


class UnpaddedOnRank1(LmHeadTpProposer):
    """Rank 1 sends its real rows only: the ranks gather different sizes (a hang on HCCL/NCCL)."""

    def pad(self, rows: torch.Tensor) -> torch.Tensor:
        return rows if self.tp_rank == 1 else super().pad(rows)


def pad_truncating(rows: torch.Tensor, agreed: int) -> torch.Tensor:
    """The 0.13-era proposer's padding: ``F.pad`` by ``agreed - n``, which crops rows when negative."""
    return torch.nn.functional.pad(rows, (0, agreed - rows.shape[0]))


class VocabGatheredOverPcpGroup(PcpLmHeadTpProposer):
    """On a PCP x TP mesh, the vocabulary slices gathered over the PCP group: every rank there holds
    the same slice, so the logits repeat one slice."""

    def tp_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.gather(tensor)
