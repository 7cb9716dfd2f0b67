"""The proposer's input preparation as one object with a method per step.

``CoreOps`` is what the proposer calls; a test swaps in a subclass that breaks
one step on purpose and checks that the properties catch it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mtp import next_tokens, prepare, steps
from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.validate import validate_batch, validate_sampled


@dataclass
class PreparedCall:
    """Everything the first pass and the later steps need from one call.

    input_ids:      int32 [N] device, first-pass ids (shifted, next tokens written;
                    draft_model: unshifted, each next token in a row of its own).
    positions:      int64 [N] device, the position of each first-pass row.
    base_positions: int64 [B] device, position of each request's sample row.
    """

    next: NextTokens
    first: FirstPassInputs
    input_ids: torch.Tensor
    positions: torch.Tensor
    base_positions: torch.Tensor


class CoreOps:
    """Steps 1-4 of a propose call (docs/DESIGN.md), each overridable."""

    def next_tokens(self, cfg: ProposerConfig, sampled: SampledTokens, device: torch.device) -> NextTokens:
        if sampled.is_padded:
            return next_tokens.next_tokens_padded(sampled, cfg.vocab_size, device)
        return next_tokens.next_tokens_host(sampled, device)

    def prepare(
        self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens, nxt: NextTokens
    ) -> FirstPassInputs:
        if sampled.is_padded:
            return prepare.prepare_padded(batch, nxt.valid_counts, cfg.max_num_tokens)
        return prepare.prepare_unpadded(batch, next_tokens.host_valid_counts(sampled), cfg.max_num_tokens)

    def first_pass_input_ids(self, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
        return prepare.first_pass_input_ids(
            batch.token_ids[first.token_indices], first.sample_indices, nxt.next_token_ids
        )

    def expand_by_next_token(
        self, cfg: ProposerConfig, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens
    ) -> tuple[FirstPassInputs, torch.Tensor, torch.Tensor]:
        """draft_model: the first pass unshifted, one row per request for its next token."""
        return prepare.expand_by_next_token(
            batch, first, nxt.next_token_ids, cfg.block_size, cfg.max_model_len, cfg.max_num_tokens
        )

    def advance_step(
        self,
        cfg: ProposerConfig,
        base_positions: torch.Tensor,
        accepted_seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        step: int | torch.Tensor,
    ) -> StepMeta:
        return steps.advance_step(
            base_positions, accepted_seq_lens, step, block_table, cfg.block_size, cfg.max_model_len
        )

    def validate(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> None:
        """Refuse a malformed call before anything is written (``ValueError`` naming the field)."""
        validate_batch(batch, cfg)
        validate_sampled(sampled, batch, cfg)

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        """Validate the inputs, then run steps 1-3."""
        self.validate(cfg, batch, sampled)
        nxt = self.next_tokens(cfg, sampled, batch.query_start_loc.device)
        return self.first_pass(cfg, batch, self.prepare(cfg, batch, sampled, nxt), nxt)

    def first_pass(
        self, cfg: ProposerConfig, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens
    ) -> PreparedCall:
        """The first pass's ids and positions from steps 1-2 (a draft model's: its rows added first)."""
        if cfg.method == "draft_model":
            first, ids, positions = self.expand_by_next_token(cfg, batch, first, nxt)
        else:
            ids, positions = self.first_pass_input_ids(batch, first, nxt), batch.positions[first.token_indices]
        return PreparedCall(nxt, first, ids, positions, positions[first.sample_indices])
