"""The proposer with its lm head split over a tensor-parallel (TP) group (seed: ``lmhead_tp_enable``).

Each rank holds a slice of the vocabulary. Every logit computation pads its
sample rows to a size all ranks agree on, computes this rank's vocabulary
slice for them, all-gathers the slices over the group and cuts the result
back to the real rows. The agreed size is the padded token count of the
first pass in a decode-only batch, ``max_num_reqs`` (the scheduler's
``max_num_seqs``) when a prefill is present: ranks of a data-parallel group
may hold different batches, and only a size fixed this way is the same on
all of them. More rows than the agreed size is an error, never a silent cut
(docs/DESIGN.md bug class 13); the 0.13-era proposer pads with ``F.pad``, which crops when the
pad is negative.

Graph modes: ``piecewise`` (logits computed outside the graphs, as here);
``full`` would bake one agreed size into each graph and is refused.
"""

from __future__ import annotations

import torch

from mtp.collectives import GroupRank
from mtp.proposer import FIRST, GraphMode, MtpProposer


def agreed_rows(num_input_tokens: int, has_prefill: bool, max_num_seqs: int) -> int:
    """The row count every rank pads its sample rows to."""
    return max_num_seqs if has_prefill else num_input_tokens


def pad_sample_rows(rows: torch.Tensor, agreed: int) -> torch.Tensor:
    """``rows`` padded with row 0 up to ``agreed``; ``ValueError`` if there are more rows than that."""
    n = rows.shape[0]
    if n > agreed:
        raise ValueError(f"sample_indices.shape[0]={n}: more requests than the agreed lm-head TP size {agreed}")
    return torch.cat([rows, torch.zeros(agreed - n, dtype=rows.dtype, device=rows.device)])


class TpGroupRank(GroupRank):
    """A grouped proposer whose group is the TP group; a proposer on a second group as well
    (``mtp.pcp_tp``) sets ``tp_rank``, ``tp_size`` and ``tp_gather`` to that group's."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tp_rank, self.tp_size = self.group_rank, self.group_size

    def tp_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.gather(tensor)


class LmHeadTpProposer(TpGroupRank, MtpProposer):
    """``MtpProposer`` on rank ``rank`` of a TP group of ``size``; ``all_gather`` gathers rows over it.

    The draft model must offer ``compute_logits_shard(hidden, rank, size)``.
    """

    def __init__(self, cfg, model, device, ops=None, mode=GraphMode.EAGER, capture_sizes=None, **group):
        """``group``: rank, size and all_gather (``GroupRank``)."""
        if GraphMode(mode) is GraphMode.FULL:
            raise ValueError("mode='full': lm-head TP computes logits outside the graphs (eager or piecewise)")
        if not callable(getattr(model, "compute_logits_shard", None)):
            raise ValueError("model: lm-head TP needs compute_logits_shard(hidden, rank, size)")
        super().__init__(cfg, model, device, ops=ops, mode=mode, capture_sizes=capture_sizes, **group)
        self.agreed = cfg.max_num_reqs  # a dummy run samples every request row

    def propose(self, batch, sampled):
        self.agreed = agreed_rows(
            self._size(FIRST, batch.num_tokens), bool((batch.num_draft_tokens_cpu == 0).any()), self.cfg.max_num_reqs
        )
        try:
            return super().propose(batch, sampled)
        finally:
            self.agreed = self.cfg.max_num_reqs

    def draft_logits(self, out: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Full-vocabulary logits of the real rows, from every rank's slice of the padded rows."""
        if rows is None:
            rows = torch.arange(out.shape[0], device=out.device)
        n = rows.shape[0]
        padded = self.pad(rows)
        shard = self.model.compute_logits_shard(out[padded], self.tp_rank, self.tp_size)
        slices = self.tp_gather(shard).view(self.tp_size, padded.shape[0], -1)
        return self.join(slices)[:n, : self.cfg.vocab_size]

    def pad(self, rows: torch.Tensor) -> torch.Tensor:
        return pad_sample_rows(rows, self.agreed)

    def join(self, slices: torch.Tensor) -> torch.Tensor:
        """[size, M, V/size] vocabulary slices, rank 0's first -> [M, V]."""
        return slices.permute(1, 0, 2).reshape(slices.shape[1], -1)
