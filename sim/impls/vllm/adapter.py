"""vLLM 0.33.0's ``EagleProposer`` as an implementation under test (``--impl vllm``).

``VllmOps`` computes docs/DESIGN.md steps 1-4 with vLLM's own functions
(``prepare_next_token_ids_padded`` / ``_cpu``, ``prepare_inputs_padded`` /
``prepare_inputs``, the first-pass input shift of ``set_inputs_first_pass``,
and the per-step kernel ``eagle_step_update_slot_mapping_and_metadata``) and
returns the core's types, so the gate's properties run on them unchanged.
``VllmProposer`` drives vLLM's whole ``propose`` loop with the simulator's
tiny MTP model and paged cache, behind ``MtpProposer``'s constructor.

Where vLLM differs by design, the difference is named in
``sim.impls.vllm.divergences`` (and docs/DIVERGENCES.md); the properties that
cannot hold are listed in ``Implementation.skips`` with that reason.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.ops import CoreOps, PreparedCall
from mtp.validate import validate_batch, validate_sampled
from sim.impls import Implementation, ImplementationUnavailable
from sim.impls.eager_adapter import EagerAdapter
from sim.impls.fresh_start import start_fresh
from sim.impls.vllm import interop
from sim.impls.vllm.divergences import DIVERGENCES, GATE_SKIPS, HOST_READS, RULES
from sim.impls.vllm.eagle import configured, eagle_proposer
from sim.impls.vllm.model import SnapshotAttnGroup, VllmTinyMtp

GREEDY = SimpleNamespace(all_greedy=True)  # vLLM reads nothing else of it in greedy drafting


def _proposer(cfg: ProposerConfig):
    return configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size)


class VllmOps(CoreOps):
    """Steps 1-4 by vLLM's functions; validation and the step wiring are the core's."""

    def next_tokens(self, cfg: ProposerConfig, sampled: SampledTokens, device: torch.device) -> NextTokens:
        raise NotImplementedError("VllmOps needs the batch: prepare_call calls _next_tokens")

    def _next_tokens(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> NextTokens:
        p = _proposer(cfg)
        step_one = interop.to_step_one_inputs(batch, sampled, cfg.vocab_size)
        if sampled.is_padded:
            ids, counts = p.prepare_next_token_ids_padded(
                sampled.padded, step_one.requests, step_one.input_batch, step_one.discard_mask
            )
            return NextTokens(next_token_ids=ids.clone(), valid_counts=counts.clone())
        ids = p.prepare_next_token_ids_cpu(
            step_one.sampled_lists, step_one.requests, step_one.input_batch, step_one.num_scheduled
        )
        counts = torch.tensor([len(x) for x in step_one.sampled_lists], dtype=torch.int32)
        return NextTokens(next_token_ids=ids.to(batch.query_start_loc.device), valid_counts=counts)

    def prepare(
        self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens, nxt: NextTokens
    ) -> FirstPassInputs:
        p = _proposer(cfg)
        cad = interop.to_common_attn_metadata(batch)
        if sampled.is_padded:
            spec = interop.to_spec_decode_metadata(batch)
            spec_cad, sample, rejected = p.prepare_inputs_padded(cad, spec, nxt.valid_counts)
            rows = torch.arange(spec_cad.num_actual_tokens, device=sample.device)
            return interop.first_pass_from_vllm(spec_cad, rows, sample, rejected, cfg.max_num_tokens, padded=True)
        lists = [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]
        spec_cad, rows = p.prepare_inputs(cad, lists, [int(k) for k in batch.num_draft_tokens_cpu])
        spec_cad.seq_lens = spec_cad.seq_lens.clone()  # divergence cpu-seq-lens-alias
        rejected = batch.seq_lens - spec_cad.seq_lens  # prepare_inputs returns no count: it is the drop
        sample = spec_cad.query_start_loc[1:] - 1  # what propose() samples when given no indices
        return interop.first_pass_from_vllm(spec_cad, rows, sample, rejected, cfg.max_num_tokens, padded=False)

    def first_pass_input_ids(self, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
        """vLLM's ``set_inputs_first_pass`` on its own buffer (rows it never writes keep old values)."""
        p = eagle_proposer(batch.hidden_states.shape[1])
        n = first.num_tokens
        rows = first.token_indices
        p.set_inputs_first_pass(
            target_token_ids=batch.token_ids[rows],
            next_token_ids=nxt.next_token_ids,
            target_positions=batch.positions[rows],
            target_hidden_states=batch.hidden_states[rows].to(p.hidden_states.dtype),
            token_indices_to_sample=first.sample_indices,
            cad=None,
            num_rejected_tokens_gpu=None,
        )
        return p.input_ids[:n].clone()

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

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        """``CoreOps.prepare_call`` with vLLM's step 1, which reads request states built from the batch."""
        validate_batch(batch, cfg)
        validate_sampled(sampled, batch, cfg)
        nxt = self._next_tokens(cfg, batch, sampled)
        first = self.prepare(cfg, batch, sampled, nxt)
        ids = self.first_pass_input_ids(batch, first, nxt)
        base = batch.positions[first.token_indices][first.sample_indices]
        return PreparedCall(next=nxt, first=first, input_ids=ids, base_positions=base)


class VllmProposer(EagerAdapter):
    """vLLM's ``EagleProposer.propose`` behind ``MtpProposer``'s constructor and trace (eager only)."""

    label, graphs_need = "the vLLM adapter", "a GPU (CUDA graphs)"

    def __init__(self, cfg: ProposerConfig, model, device, ops=None, mode="eager"):
        super().__init__(cfg, model, device, ops, mode)
        self.model = VllmTinyMtp(model)
        self.attn_group = SnapshotAttnGroup()
        start_fresh(_proposer(cfg))  # a serving run starts where a newly built vLLM proposer would

    def _vllm(self):
        p = _proposer(self.cfg)
        p.model = self.model
        p.draft_attn_groups = [self.attn_group]
        p._draft_attn_layer_names = {self.attn_group.layer_names[0]}
        return p

    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """Draft tokens, int64 [B, K], as vLLM's runner would call ``propose`` (padded or unpadded)."""
        validate_batch(batch, self.cfg)
        validate_sampled(sampled, batch, self.cfg)
        p, k = self._vllm(), self.cfg.num_spec_tokens
        step_one = interop.to_step_one_inputs(batch, sampled, self.cfg.vocab_size)
        cad = interop.to_common_attn_metadata(batch)
        if self.trace is not None:
            self.trace.clear()
        self.model.trace, self.model.calls = self.trace, 0
        if sampled.is_padded:
            ids, counts = p.prepare_next_token_ids_padded(
                sampled.padded, step_one.requests, step_one.input_batch, step_one.discard_mask
            )
            spec_cad, sample, rejected = p.prepare_inputs_padded(cad, interop.to_spec_decode_metadata(batch), counts)
            n = spec_cad.num_actual_tokens
            rows = torch.arange(n)
            extra = {"token_indices_to_sample": sample, "num_rejected_tokens_gpu": rejected}
        else:
            ids = p.prepare_next_token_ids_cpu(
                step_one.sampled_lists, step_one.requests, step_one.input_batch, step_one.num_scheduled
            )
            spec_cad, rows = p.prepare_inputs(cad, step_one.sampled_lists, [int(x) for x in batch.num_draft_tokens_cpu])
            spec_cad.seq_lens = spec_cad.seq_lens.clone()  # divergence cpu-seq-lens-alias
            sample = spec_cad.query_start_loc[1:] - 1
            extra = {"token_indices_to_sample": None}
        self.model.sample_indices = sample.to(torch.int64)
        drafts = p.propose(
            num_speculative_tokens=k,
            target_token_ids=batch.token_ids[rows],
            target_positions=batch.positions[rows],
            target_hidden_states=batch.hidden_states[rows].to(torch.float32),
            next_token_ids=ids,
            common_attn_metadata=spec_cad,
            sampling_metadata=GREEDY,
            **extra,
        )
        self.logits_calls += k
        return drafts.to(torch.int64).view(batch.num_reqs, k).clone()


def implementation() -> Implementation:
    """The ``vllm`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    reason = interop.unavailable_reason()
    if reason:
        raise ImplementationUnavailable("vllm", reason)
    return Implementation(
        "vllm", VllmOps(), VllmProposer, dict(GATE_SKIPS), RULES, tuple(DIVERGENCES.values()), host_reads=HOST_READS
    )
