"""The MTP proposer: K drafts per request from one verified batch.

Inputs are prepared by ``CoreOps`` (steps 1-3 of DESIGN.md), then the first
pass runs the draft model over every kept row and drafts token 1 at each
request's sample row; steps 2..K run one row per request with the metadata of
``CoreOps.advance_step``. Buffers are allocated once, from the config, and
written in place, as a graph replay needs.
"""

from __future__ import annotations

import torch

from mtp.batch import SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.model import AttentionMeta, DraftModel
from mtp.ops import CoreOps, PreparedCall
from mtp.prepare import PADDING_SLOT
from mtp.trace import StepRecord


class MtpProposer:
    """Drafts ``cfg.num_spec_tokens`` tokens per request with ``model``.

    A call that fails validation raises ``ValueError`` before any buffer is
    written, so the proposer stays usable.
    """

    def __init__(self, cfg: ProposerConfig, model: DraftModel, device: torch.device, ops: CoreOps | None = None):
        if model.hidden_size != cfg.hidden_size:
            raise ValueError(f"model.hidden_size={model.hidden_size!r}: config says {cfg.hidden_size}")
        self.cfg, self.model, self.device = cfg, model, device
        self.ops = ops or CoreOps()
        n, b = cfg.max_num_tokens, cfg.max_num_reqs
        self.input_ids = torch.zeros(n, dtype=torch.int32, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.hidden_states = torch.zeros(n, cfg.hidden_size, dtype=torch.float32, device=device)
        self.slot_mapping = torch.full((n,), PADDING_SLOT, dtype=torch.int64, device=device)
        self.step_qsl = torch.arange(b + 1, dtype=torch.int32, device=device)  # one row per request
        self.drafts = torch.zeros(b, cfg.num_spec_tokens, dtype=torch.int64, device=device)
        self.trace: list[StepRecord] | None = None

    def record(self, on: bool = True) -> None:
        """Keep a ``StepRecord`` of every model call of the next propose calls (tests only)."""
        self.trace = [] if on else None

    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """Draft tokens, int64 [B, K]."""
        prepared = self.ops.prepare_call(self.cfg, batch, sampled)
        if self.trace is not None:
            self.trace.clear()
        hidden = self._first_pass(batch, prepared)
        for step in range(2, self.cfg.num_spec_tokens + 1):
            hidden = self._draft_step(batch, prepared, hidden, step)
        return self.drafts[: batch.num_reqs].clone()

    def _first_pass(self, batch: VerifiedBatch, prepared: PreparedCall) -> torch.Tensor:
        first = prepared.first
        n = first.num_tokens
        self.input_ids[:n] = prepared.input_ids
        self.positions[:n] = batch.positions[first.token_indices]
        self.hidden_states[:n] = batch.hidden_states[first.token_indices].to(self.hidden_states.dtype)
        self.slot_mapping.copy_(first.slot_mapping)
        attn = AttentionMeta(first.query_start_loc, first.seq_lens, batch.block_table, self.slot_mapping[:n])
        return self._run(1, self.input_ids[:n], self.positions[:n], self.hidden_states[:n], attn, first.sample_indices)

    def _draft_step(
        self, batch: VerifiedBatch, prepared: PreparedCall, hidden: torch.Tensor, step: int
    ) -> torch.Tensor:
        b = batch.num_reqs
        meta = self.ops.advance_step(self.cfg, prepared, batch.block_table, step)
        self.input_ids[:b] = self.drafts[:b, step - 2]
        self.positions[:b] = meta.positions
        self.hidden_states[:b] = hidden
        self.slot_mapping[:b] = meta.slot_mapping
        rows = self.step_qsl[:b]
        attn = AttentionMeta(self.step_qsl[: b + 1], meta.seq_lens, batch.block_table, self.slot_mapping[:b])
        return self._run(step, self.input_ids[:b], self.positions[:b], self.hidden_states[:b], attn, rows)

    def _run(self, step, input_ids, positions, hidden, attn: AttentionMeta, sample_rows) -> torch.Tensor:
        if self.trace is not None:
            self.trace.append(
                StepRecord.capture(
                    step,
                    input_ids=input_ids,
                    positions=positions,
                    seq_lens=attn.seq_lens,
                    slot_mapping=attn.slot_mapping,
                    query_start_loc=attn.query_start_loc,
                    sample_indices=sample_rows,
                )
            )
        out = self.model.forward(input_ids, positions, hidden, attn)
        sampled_hidden = out[sample_rows.to(torch.int64)]
        b = sampled_hidden.shape[0]
        self.drafts[:b, step - 1] = self.model.compute_logits(sampled_hidden).argmax(dim=-1)
        return sampled_hidden
