"""Deliberately broken PCP proposers: upstream PCP bugs of the MTP path.

Each must make the PCP properties fail (tests/properties/test_pcp.py).
"""

from __future__ import annotations

import torch

from mtp.pcp_proposer import PcpProposer
from mtp.proposer import STEP


class DecodeFixedReshape(PcpProposer):
    """Decode hidden states un-padded with a fixed reshape, as if every decode
    had K+1 rows copied P times side by side at the front of the gather."""

    def restore(self, gathered, local):
        out = super().restore(gathered, local)
        k1 = self.cfg.num_spec_tokens + 1
        decodes = int((local.plan.padded_lens == k1).sum())
        rows = decodes * k1
        if rows:
            fixed = gathered[: rows * self.pcp_size].reshape(decodes, k1 * self.pcp_size, -1)[:, :k1].reshape(rows, -1)
            out = torch.cat([fixed, out[rows:]])
        return out


class GraphPaddingBeforeGather(PcpProposer):
    """Each rank's outputs padded up to a graph size before the all-gather,
    but restored with the index of the unpadded rows."""

    def gather(self, tensor):
        if tensor.dim() == 2 and tensor.shape[1] == self.cfg.hidden_size and tensor.shape[0] % 8:
            pad = torch.zeros(8 - tensor.shape[0] % 8, tensor.shape[1], dtype=tensor.dtype, device=tensor.device)
            tensor = torch.cat([tensor, pad])
        return super().gather(tensor)


class LogitsOnceOnRank1(PcpProposer):
    """Bug class 7: rank 1 stops after the first pass (the 0.13-era proposer's dummy run
    computing logits once), so it issues fewer collectives than rank 0."""

    def _run(self, phase, size, bound):
        if self.pcp_rank == 1 and phase == STEP:
            return
        super()._run(phase, size, bound)


class PaddingRowsWriteKv(PcpProposer):
    """The first pass's padding rows keep the slot of the row they stand in for (row 0) instead of
    the padding slot, so they overwrite its KV with their masked inputs. Visible on a group of one
    too (a prefill of odd length is padded to 2P chunks): tests/properties/test_group_of_one.py."""

    def _attn(self, qsl, seq_lens, block_table, slots, bound):
        local = self.local
        if local is not None and qsl is local.query_start_loc:  # the first pass
            slots = self.slot_mapping[local.rows]
        return super()._attn(qsl, seq_lens, block_table, slots, bound)
