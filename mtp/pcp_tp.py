"""Prefill context parallel and a tensor-parallel path on one mesh of P x T ranks.

Rank (p, t) is PCP rank p of its PCP group (the ranks sharing t) and TP rank t
of its TP group (the ranks sharing p). The first pass splits rows over the
PCP group (``mtp.pcp_proposer``); the TP path runs over the TP group: the lm
head's vocabulary (``mtp.tp``) or the draft layer's rows (``mtp.shared_expert_dp``).
Each group's all-gather is checked on its own (``mtp.collectives``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mtp.collectives import checked_all_gather
from mtp.pcp_proposer import PcpProposer
from mtp.shared_expert_dp import SharedExpertDpProposer
from mtp.tp import LmHeadTpProposer


class PcpTpRank:
    """Mixin before ``PcpProposer``: takes the TP group's ``tp_rank``, ``tp_size`` and ``tp_all_gather``."""

    def __init__(
        self, *args, tp_rank: int, tp_size: int, tp_all_gather: Callable[[torch.Tensor], torch.Tensor], **kwargs
    ):
        if not 0 <= tp_rank < tp_size:
            raise ValueError(f"tp_rank={tp_rank!r}: must lie in [0, tp_size={tp_size})")
        super().__init__(*args, **kwargs)
        self.tp_rank, self.tp_size, self._tp_all_gather = tp_rank, tp_size, tp_all_gather
        self.tp_collectives = 0

    def close_collectives(self) -> None:
        super().close_collectives()
        self.tp_gather(self.seq_lens.new_zeros(1))  # the TP group's closing gather

    def tp_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        self.tp_collectives += 1
        tag = (self.tp_collectives, self._step_tag)
        return checked_all_gather(self._tp_all_gather, tensor, self.tp_rank, self.tp_size, tag, self.in_capture)


class PcpLmHeadTpProposer(PcpTpRank, PcpProposer, LmHeadTpProposer):
    """PCP over the PCP group, the lm head split over the TP group."""


class PcpSharedExpertDpProposer(PcpTpRank, PcpProposer, SharedExpertDpProposer):
    """PCP over the PCP group, the draft layer sequence parallel over the TP group."""
