"""The proposer with shared-expert data parallel over a TP group (seed: ``enable_shared_expert_dp``).

The draft layer runs sequence parallel: each of the T ranks of the tensor-
parallel group holds 1/T of the rows. Before every forward of the draft model
(the first pass, each later step, the dummy run) the rows' positions and
hidden states are padded to a multiple of T and split, rank r keeping chunk r
(``mtp.model.SequenceParallel``); the model gathers the rows it attends over
and hands back its chunk of the output, which the proposer all-gathers over
the group and cuts back to the real rows before sampling. Every rank of a
group runs the same calls, so every rank issues the same collectives.

The 0.13-era proposer does the split with ``maybe_pad_and_reduce``, a reduce-scatter: it
sums the ranks' copies before splitting, which leaves each rank its chunk
only when the copies are partial sums of the values. Positions and the
target's hidden states are whole on every rank, so a literal reduce-scatter
hands each rank T times its chunk (``tests/meta/broken_sedp.py``
``ReduceScatteredLikeTheSeed``, caught by the gate).
"""

from __future__ import annotations

from mtp.model import AttentionMeta, SequenceParallel
from mtp.proposer import MtpProposer
from mtp.tp import LmHeadTpProposer, TpGroupRank


class SharedExpertDpProposer(TpGroupRank, MtpProposer):
    """``MtpProposer`` on rank ``rank`` of a TP group of ``size`` whose draft layer runs sequence
    parallel; ``all_gather`` gathers rows over the group. The draft model must honour
    ``AttentionMeta.sequence_parallel``."""

    def split(self, rows: int) -> SequenceParallel:
        """How ``rows`` rows are split over the TP group."""
        return SequenceParallel(rows, self.tp_rank, self.tp_size, self.tp_gather)

    def model_forward(self, input_ids, positions, hidden_states, attn: AttentionMeta):
        sp = attn.sequence_parallel = self.split(input_ids.shape[0])
        out = super().model_forward(input_ids, sp.shard(positions, dim=-1), sp.shard(hidden_states), attn)
        return sp.gather(out)


class SharedExpertDpLmHeadTpProposer(SharedExpertDpProposer, LmHeadTpProposer):
    """Both on one TP group: the draft layer sequence parallel, the lm head split by vocabulary."""
