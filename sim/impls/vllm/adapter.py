"""vLLM 0.33.0's ``EagleProposer`` as an implementation under test (``--impl vllm``).

``VllmOps`` computes docs/DESIGN.md steps 1-4 with vLLM's own functions
(``prepare_next_token_ids_padded`` / ``_cpu``, ``prepare_inputs_padded`` /
``prepare_inputs``, the first-pass input shift of ``set_inputs_first_pass``,
and the per-step kernel ``eagle_step_update_slot_mapping_and_metadata``) and
returns the core's types, so the gate's properties run on them unchanged.
``VllmProposer`` drives vLLM's whole ``propose`` loop with the simulator's
tiny MTP model and paged cache, behind ``MtpProposer``'s constructor. What is
vLLM 0.33's own is here: its padded step-1 and steps-2-3 calls, the shift, the
step kernel and ``propose``'s arguments; the rest is the kit's (``sim.impls.kit``).

Where vLLM differs by design, the difference is named in
``sim.impls.vllm.divergences`` (and docs/DIVERGENCES.md); the properties that
cannot hold are listed in ``Implementation.skips`` with that reason.
"""

from __future__ import annotations

import contextlib

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from sim.impls import Implementation
from sim.impls.kit import factory, steps
from sim.impls.kit import vllm_interop as interop
from sim.impls.kit.eager_adapter import EagerAdapter
from sim.impls.kit.fresh_start import start_fresh
from sim.impls.kit.runner_ops import HelperOps
from sim.impls.kit.vllm_eagle import configured, eagle_proposer
from sim.impls.kit.vllm_model import SnapshotAttnGroup, VllmTinyMtp, draft_class
from sim.impls.kit.vllm_types import GREEDY
from sim.impls.vllm import divergences


def _proposer(cfg: ProposerConfig):
    return configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size, cfg.method)


def next_tokens(p, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> NextTokens:
    """Step 1 by vLLM: padded takes a discard mask."""

    def padded(s):
        return p.prepare_next_token_ids_padded(sampled.padded, s.requests, s.input_batch, s.discard_mask)

    return steps.next_tokens(p, batch, sampled, vocab_size, padded)


def prepare_inputs(p, batch: VerifiedBatch, sampled: SampledTokens, valid_counts: torch.Tensor, triton: bool = False):
    """Steps 2-3 by vLLM: (spec metadata, token indices, sample indices or None, rejected counts).
    Padded, the first pass runs every row; unpadded, ``seq_lens`` is cloned (divergence cpu-seq-lens-alias)."""

    def padded(cad, spec):
        spec_cad, sample, rejected = p.prepare_inputs_padded(cad, spec, valid_counts)
        return spec_cad, torch.arange(spec_cad.num_actual_tokens, device=sample.device), sample, rejected

    spec_cad, rows, sample, rejected = steps.prepare_inputs(
        p, batch, sampled, interop.to_common_attn_metadata(batch), padded
    )
    if not sampled.is_padded:
        spec_cad.seq_lens = spec_cad.seq_lens.clone()  # divergence cpu-seq-lens-alias
    return spec_cad, rows, sample, rejected


class VllmOps(HelperOps):
    """Steps 1-4 by vLLM's functions; validation and the step wiring are the core's."""

    step_one = staticmethod(next_tokens)
    steps_two_three = staticmethod(prepare_inputs)

    def helpers(self, cfg: ProposerConfig, padded: bool):
        """The shared proposer, one for either mode: vLLM's helpers take the mode per call."""
        return _proposer(cfg)

    def first_pass_input_ids(self, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
        """vLLM's ``set_inputs_first_pass`` on its own buffer (rows it never writes keep old values)."""
        return steps.shifted_input_ids(eagle_proposer(batch.hidden_states.shape[1]), batch, first, nxt)

    def expand_by_next_token(self, cfg, batch, first, nxt):
        """A draft model's first pass by vLLM's ``set_inputs_first_pass`` (``DraftModelProposer``'s)."""
        cad = interop.to_common_attn_metadata(batch, first)
        return steps.expand_by_next_token(_proposer(cfg), batch, first, nxt, cad, cfg.max_num_tokens)

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step) -> StepMeta:
        """Step ``step``'s metadata by running vLLM's per-step kernel ``step - 1`` times (it is incremental)."""
        utils = interop.import_vllm("vllm.v1.spec_decode.utils")
        b = base_positions.shape[0]
        positions = base_positions.to(torch.int64).clone()
        seq_lens = accepted_seq_lens.to(torch.int32).clone()
        slots = torch.full((b,), -1, dtype=torch.int64, device=positions.device)
        table = block_table.to(torch.int32).contiguous()
        for _ in range(int(step) - 1):
            out = torch.empty_like(positions)
            utils.eagle_step_update_slot_mapping_and_metadata(
                positions_1d=positions,
                block_table_tensor=table,
                seq_lens=seq_lens,
                block_size=cfg.block_size,
                max_model_len=cfg.max_model_len,
                out_clamped_positions=out,
                out_slot_mapping=slots,
            )
            positions = out
        return StepMeta(positions=positions, seq_lens=seq_lens, slot_mapping=slots)


class VllmProposer(EagerAdapter):
    """vLLM's ``EagleProposer.propose`` behind ``MtpProposer``'s constructor and trace (eager only), for
    method ``mtp``, ``eagle`` or ``eagle3`` (its draft then vLLM's Llama EAGLE class: ``draft_class``;
    eagle3's target's three layers handed as its runner concatenates them), or ``draft_model`` (vLLM's
    ``DraftModelProposer``, its first pass a row more per request)."""

    label, graphs_need = "the vLLM adapter", "a GPU (CUDA graphs)"

    def __init__(self, cfg: ProposerConfig, model, device, ops=None, mode="eager"):
        super().__init__(cfg, model, device, mode)
        self.model = draft_class(VllmTinyMtp, cfg.method, interop.import_vllm)(model)
        self.attn_group = SnapshotAttnGroup()
        start_fresh(_proposer(cfg))  # a serving run starts where a newly built vLLM proposer would

    def _vllm(self):
        p = _proposer(self.cfg)
        p.model = self.model
        if self.cfg.method == "draft_model":  # a draft model returns one state (vLLM's model_returns_tuple)
            self.model.returns_tuple = p.model_returns_tuple()
        p.draft_attn_groups = [self.attn_group]
        p._draft_attn_layer_names = {self.attn_group.layer_names[0]}
        return p

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """vLLM's ``propose`` as its runner would call it (padded or unpadded)."""
        p = self._vllm()
        nxt = next_tokens(p, batch, sampled, self.cfg.vocab_size)
        spec_cad, rows, sample, rejected = prepare_inputs(p, batch, sampled, nxt.valid_counts)
        self.model.sample_indices = (spec_cad.query_start_loc[1:] - 1 if sample is None else sample).to(torch.int64)
        extra = {"num_rejected_tokens_gpu": rejected} if sampled.is_padded else {}
        with self._rows_sampled_as_made(p):
            return p.propose(
                num_speculative_tokens=k,
                target_token_ids=batch.token_ids[rows],
                target_positions=batch.positions[rows],
                target_hidden_states=batch.hidden_states[rows].to(torch.float32),
                next_token_ids=nxt.next_token_ids,
                common_attn_metadata=spec_cad,
                sampling_metadata=GREEDY,
                token_indices_to_sample=sample,
                **extra,
            )

    @contextlib.contextmanager
    def _rows_sampled_as_made(self, p):
        """A draft model's first pass adds rows, so the rows it samples are what its ``set_inputs_first_pass``
        returns (vLLM keeps them nowhere else): read as it returns them, for the first forward's record."""
        if self.cfg.method != "draft_model":
            yield
            return
        made = type(p).set_inputs_first_pass

        def observed(*args, **kwargs):
            out = made(p, *args, **kwargs)
            self.model.sample_indices = out[1].to(torch.int64)
            return out

        p.set_inputs_first_pass = observed
        try:
            yield
        finally:
            del p.set_inputs_first_pass


def implementation() -> Implementation:
    """The ``vllm`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    return factory.implementation("vllm", interop.unavailable_reason, VllmOps(), VllmProposer, divergences)
