"""The proposer on one rank of a prefill-context-parallel (PCP) group.

The first pass runs only this rank's share of the rows (``mtp.pcp``): its
two chunks of every prefill and every decode row. Each contiguous run of
rows attends as a request of its own, ending at the run's last position, so
chunks see exactly the prefix they would see unsplit. The model all-gathers
K/V over the group (``AttentionMeta.kv_gather``) so every rank's cache holds
every row; the first pass's outputs are all-gathered and put back in row
order before sampling. Later steps run every request on every rank. The
drafts and the per-step metadata equal those of a single rank.

Graph modes capture the later steps (collectives included); the first pass
runs eagerly, since its per-rank layout changes with every batch (upstream
vllm-ascend does not capture it under PCP either).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mtp.batch import VerifiedBatch
from mtp.collectives import GroupRank
from mtp.model import AttentionMeta
from mtp.pcp import PAD_ROW, PcpPlan, pcp_split_plan
from mtp.proposer import FIRST, MtpProposer


@dataclass
class RankRows:
    """This rank's first-pass rows as a batch of their own (device tensors).

    rows:  int64 [R], first-pass row of each local row (padding: row 0, masked).
    pad:   bool [R], padding rows (no KV write, output ignored).
    query_start_loc, seq_lens, block_table: one entry per run of contiguous rows.
    """

    plan: PcpPlan
    rows: torch.Tensor
    pad: torch.Tensor
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    restore_index: torch.Tensor


class PcpProposer(GroupRank, MtpProposer):
    """``MtpProposer`` on rank ``rank`` of ``size``; ``all_gather`` gathers rows over the group."""

    eager_phases = frozenset({FIRST})

    def __init__(self, *args, **kwargs):  # the core's arguments, and rank, size, all_gather (``GroupRank``)
        super().__init__(*args, **kwargs)
        self.pcp_rank, self.pcp_size = self.group_rank, self.group_size
        self.local: RankRows | None = None  # pragma: no mutate (never read before the first pass sets it)

    def _load_first_pass(self, batch: VerifiedBatch, prepared, rows: int) -> None:
        super()._load_first_pass(batch, prepared, rows)
        self.local = self._rank_rows(batch, prepared)

    def _attn(self, qsl, seq_lens, block_table, slots, bound: int) -> AttentionMeta:
        meta = super()._attn(qsl, seq_lens, block_table, slots, bound)
        meta.kv_gather = self.gather
        return meta

    def _rank_rows(self, batch: VerifiedBatch, prepared) -> RankRows:
        """Plan the split and describe this rank's rows, from host copies only."""
        qsl = prepared.first.query_start_loc_cpu
        qlens = np.diff(qsl)
        # First-pass rows of request r sit at positions seq_len - query_len ... (either mode).
        start_pos = batch.seq_lens_cpu - batch.query_lens_cpu
        plan = pcp_split_plan(qlens, batch.num_draft_tokens_cpu == 0, self.pcp_size)
        rows = plan.rank_rows[self.pcp_rank]
        pad = rows == PAD_ROW
        req = np.where(pad, batch.num_reqs, np.searchsorted(qsl, rows, side="right") - 1)
        pos = np.where(
            pad, -1, start_pos[np.minimum(req, batch.num_reqs - 1)] + rows - qsl[np.minimum(req, batch.num_reqs - 1)]
        )
        # A new run starts where the request changes or the positions stop being consecutive.
        new_run = np.ones(len(rows), dtype=bool)
        new_run[1:] = (req[1:] != req[:-1]) | (pos[1:] != pos[:-1] + 1) | pad[1:] | pad[:-1]
        starts = np.flatnonzero(new_run)
        ends = np.append(starts[1:], len(rows))
        run_req = req[starts]
        run_seq = np.where(pad[starts], 0, pos[ends - 1] + 1)
        dev = self.device.torch_device  # pragma: no mutate (None is the host, the simulator's device)

        def t(a, dtype):
            return torch.as_tensor(np.asarray(a), dtype=dtype).to(dev)

        return RankRows(
            plan=plan,
            rows=t(np.where(pad, 0, rows), torch.int64),
            pad=t(pad, torch.bool),
            query_start_loc=t(np.append(starts, len(rows)), torch.int32),
            seq_lens=t(run_seq, torch.int32),
            block_table=self._table(FIRST)[t(run_req, torch.int64)],
            restore_index=t(plan.restore_index, torch.int64),
        )

    def _first_forward(self, rows: int, bound: int) -> torch.Tensor:
        local = self.local
        pad = local.pad
        ids = self.input_ids[local.rows].masked_fill(pad, 0)
        positions = self.model_positions(self.cfg.max_num_tokens)[..., local.rows].masked_fill(pad, 0)
        hidden = self.hidden_states[local.rows].masked_fill(pad[:, None], 0.0)
        slots = self.slot_mapping[local.rows].masked_fill(pad, -1)
        attn = self._attn(local.query_start_loc, local.seq_lens, local.block_table, slots, bound)
        out = self.model_forward(ids, positions, hidden, attn)
        return self.restore(self.gather(out), local)

    def restore(self, gathered: torch.Tensor, local: RankRows) -> torch.Tensor:
        """All ranks' outputs (rank-major) back in first-pass row order."""
        return gathered[local.restore_index]
