"""Deliberately broken proposers for M-RoPE and eagle3: each must fail the
properties of tests/properties/test_mrope_eagle3.py.
"""

from __future__ import annotations

import torch

from mtp.proposer import MtpProposer


class MropeNotAdvanced(MtpProposer):
    """The 0.13-era proposer's M-RoPE defect: later steps write the scalar ``positions`` and
    leave ``mrope_positions`` as the first pass wrote it, so every draft step
    rotates by a stale row of another request."""

    def step_mrope(self, reqs: int) -> torch.Tensor:
        return self.mrope_positions[:, :reqs].clone()


class MropeRowZeroOnly(MtpProposer):
    """Later steps advance the temporal row only; height and width stay at the sample row's."""

    def step_mrope(self, reqs: int) -> torch.Tensor:
        rows = super().step_mrope(reqs).clone()
        rows[1:] = self.base_mrope[1:, :reqs]
        return rows


class MropeFromScalarPositions(MtpProposer):
    """The model rotates by the scalar positions copied into all three rows:
    right for text, wrong for every image token and for text after an image."""

    def model_positions(self, rows: int) -> torch.Tensor:
        return self.positions[:rows].expand(3, rows)


class Eagle3NotCombined(MtpProposer):
    """eagle3's auxiliary hidden states cut to their last layer instead of combined."""

    def target_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.cfg.method == "eagle3":
            hidden = hidden[:, -self.cfg.hidden_size :]
        return hidden.to(self.hidden_states.dtype)


class Eagle3CombinedEveryStep(MtpProposer):
    """``combine_hidden_states`` applied in later steps too, to the draft's own
    output repeated to the auxiliary width."""

    def _step_inputs(self, reqs: int) -> None:
        super()._step_inputs(reqs)
        if self.cfg.method == "eagle3":
            own = self.hidden_states[:reqs]
            self.hidden_states[:reqs] = self.model.combine_hidden_states(torch.cat([own, own, own], dim=-1))
