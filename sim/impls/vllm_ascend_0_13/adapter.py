"""vllm-ascend 0.13.0's ``MtpProposer`` as an implementation under test (``--impl vllm_ascend_0_13``).

``Ascend013Ops`` computes docs/DESIGN.md steps 1-4 with 0.13.0's code and returns the core's types:
step 1 by ``prepare_next_token_ids_padded`` (0.13's signature: the metadata, discard indices
and a count) / vLLM 0.13's ``prepare_next_token_ids_cpu``; steps 2-3 by ``prepare_inputs_padded``
(Triton kernel in the interpreter, or its torch fallback) / ``prepare_inputs``. The first-pass
input shift and the per-step update have no helper in 0.13: they are inline in
``MtpProposer._propose``. So the ops run ``_propose`` itself with a metadata recorder as the
model (``model.MlaTinyMtp(None)``) and read what the model was handed: the first pass's input
ids (one step), and step j's positions, seq_lens and slots (j steps from a one-token decode
batch at the given positions and lengths). ``Ascend013Proposer`` drives the whole ``_propose``
loop as 0.13's runner calls it, with the simulator's tiny MTP model and paged cache.
Where 0.13.0 differs from the core, the difference is named in ``divergences``
(docs/DIVERGENCES-vllm-ascend-0.13.md).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.ops import CoreOps, PreparedCall
from sim.impls import Implementation, ImplementationUnavailable
from sim.impls.eager_adapter import EagerAdapter
from sim.impls.fresh_start import start_fresh
from sim.impls.vllm_ascend.adapter import triton_path
from sim.impls.vllm_ascend.importing import describe
from sim.impls.vllm_ascend_0_13 import interop
from sim.impls.vllm_ascend_0_13.build import configured
from sim.impls.vllm_ascend_0_13.divergences import DIVERGENCES, GATE_SKIPS, RULES
from sim.impls.vllm_ascend_0_13.importing import import_ascend, unavailable_reason
from sim.impls.vllm_ascend_0_13.model import LAYER, MlaTinyMtp

GREEDY = SimpleNamespace(all_greedy=True)  # unread by MtpProposer's greedy drafting


def _proposer(cfg: ProposerConfig, padded: bool = True, num_spec_tokens: int | None = None):
    return configured(num_spec_tokens or cfg.num_spec_tokens, cfg.max_model_len, cfg.hidden_size, padded)


def next_tokens(p, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> NextTokens:
    """Step 1 by 0.13: padded takes the target's metadata, discard indices and a count; unpadded is vLLM's."""
    step_one = interop.to_step_one_inputs(batch, sampled, vocab_size)
    if sampled.is_padded:
        idx, n = interop.discard_indices(sampled, batch.query_start_loc.device)
        cad = interop.to_ascend_metadata(batch)
        ids, counts = p.prepare_next_token_ids_padded(
            cad, sampled.padded, step_one.requests, step_one.input_batch, idx, n
        )
        return NextTokens(next_token_ids=ids.clone(), valid_counts=counts.to(torch.int32).clone())
    ids = p.prepare_next_token_ids_cpu(
        step_one.sampled_lists, step_one.requests, step_one.input_batch, step_one.num_scheduled
    )
    counts = torch.tensor([len(x) for x in step_one.sampled_lists], dtype=torch.int32)
    return NextTokens(next_token_ids=ids.to(batch.query_start_loc.device), valid_counts=counts)


def prepare_inputs(p, batch: VerifiedBatch, sampled: SampledTokens, valid_counts: torch.Tensor, triton: bool):
    """Steps 2-3 by 0.13: (spec metadata, token indices, sample indices or None, rejected counts).

    Neither 0.13 helper returns the rejected counts: padded, they are what the sample rows
    were lowered by (``query_start_loc[r+1] - 1 - sample[r]``); unpadded, what ``seq_lens`` was."""
    cad = interop.to_ascend_metadata(batch)
    if sampled.is_padded:
        with triton_path(import_ascend("vllm_ascend.spec_decode.eagle_proposer"), triton, batch.num_reqs):
            spec_cad, rows, sample = p.prepare_inputs_padded(cad, interop.to_spec_decode_metadata(batch), valid_counts)
        rejected = (spec_cad.query_start_loc[1:] - 1 - sample).to(torch.int32)
        return spec_cad, rows, sample, rejected
    lists = [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]
    spec_cad, rows = p.prepare_inputs(cad, lists, [int(k) for k in batch.num_draft_tokens_cpu])
    rejected = (batch.seq_lens - spec_cad.seq_lens).to(torch.int32)
    return spec_cad, rows, None, rejected


def run_propose(p, model: MlaTinyMtp, cad, token_ids, positions, hidden, next_ids, sample) -> torch.Tensor:
    """``MtpProposer._propose`` with ``model`` as its draft model, as the eager runner calls it."""
    p.model = model
    p.runner.model = model
    p.attn_layer_names = [LAYER]
    p.runner.input_batch.num_reqs = next_ids.shape[0]
    model.sample_indices = (cad.query_start_loc[1:] - 1 if sample is None else sample).to(torch.int64)
    return p._propose(
        target_token_ids=token_ids,
        target_positions=positions,
        target_hidden_states=hidden.to(p.hidden_states.dtype),
        next_token_ids=next_ids,
        last_token_indices=sample,
        common_attn_metadata=cad,
        sampling_metadata=GREEDY,
        num_scheduled_tokens=int(token_ids.shape[0]),
    )


class Ascend013Ops(CoreOps):
    """Steps 1-4 by vllm-ascend 0.13.0's code; validation is the core's."""

    def __init__(self, triton: bool = True):
        self.triton = triton

    def next_tokens(self, cfg: ProposerConfig, sampled: SampledTokens, device: torch.device) -> NextTokens:
        raise NotImplementedError("Ascend013Ops needs the batch: prepare_call calls _next_tokens")

    def _next_tokens(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> NextTokens:
        return next_tokens(_proposer(cfg, sampled.is_padded), batch, sampled, cfg.vocab_size)

    def prepare(
        self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens, nxt: NextTokens
    ) -> FirstPassInputs:
        """``accepted_seq_lens`` is what 0.13's later steps start from: the MLA metadata's ``seq_lens``,
        which its builder takes from ``seq_lens_cpu`` (padded: not lowered by the rejected count)."""
        p = _proposer(cfg, sampled.is_padded)
        spec_cad, rows, sample, rejected = prepare_inputs(p, batch, sampled, nxt.valid_counts, self.triton)
        if sample is None:
            sample = spec_cad.query_start_loc[1:] - 1  # what _propose samples when given no indices
        first = interop.first_pass_from_vllm(
            spec_cad, rows, sample, rejected, cfg.max_num_tokens, padded=sampled.is_padded
        )
        first.accepted_seq_lens = spec_cad.seq_lens_cpu[: batch.num_reqs].to(torch.int32).clone()
        return first

    def first_pass_input_ids(self, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
        """The ids ``_propose``'s first pass hands the model (its own buffer: rows it never writes keep old values)."""
        hidden = batch.hidden_states.shape[1]
        p = configured(1, 4096, hidden)  # one step; sizes unread by the shift
        recorder = MlaTinyMtp(None, hidden)
        recorder.trace = []
        rows = first.token_indices
        cad = interop.first_pass_metadata(batch, first)
        run_propose(
            p, recorder, cad, batch.token_ids[rows], batch.positions[rows], batch.hidden_states[rows],
            nxt.next_token_ids, first.sample_indices,
        )  # fmt: skip
        return recorder.trace[0].input_ids.to(batch.token_ids.dtype)

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step) -> StepMeta:
        """Step ``step``'s metadata, as ``_propose`` hands it to the model: ``step`` steps run from a
        one-token decode batch at ``base_positions`` attending to ``accepted_seq_lens``."""
        return draft_steps(cfg, base_positions, accepted_seq_lens, block_table, int(step))[-1]

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        """``CoreOps.prepare_call`` with 0.13's step 1, which reads request states built from the batch."""
        self.validate(cfg, batch, sampled)
        nxt = self._next_tokens(cfg, batch, sampled)
        first = self.prepare(cfg, batch, sampled, nxt)
        ids = self.first_pass_input_ids(batch, first, nxt)
        base = batch.positions[first.token_indices][first.sample_indices]
        return PreparedCall(next=nxt, first=first, input_ids=ids, base_positions=base)


def draft_steps(cfg: ProposerConfig, base_positions, seq_lens, block_table, step: int, recorder=None) -> list[StepMeta]:
    """Steps 1..``step`` of ``_propose`` from a decode batch of one token per request (step 1: as given)."""
    b = base_positions.shape[0]
    p = configured(step, cfg.max_model_len, cfg.hidden_size)
    p.runner.with_prefill = False  # a decode batch (SpecDecoding): the runner never asks for one step only
    recorder = recorder or MlaTinyMtp(None, cfg.hidden_size)
    recorder.trace = []
    cad = interop.one_token_metadata(base_positions, seq_lens, block_table, cfg.block_size)
    zeros = torch.zeros(b, dtype=torch.int64)
    hidden = torch.zeros(b, cfg.hidden_size)
    run_propose(p, recorder, cad, zeros, base_positions.to(torch.int64), hidden, zeros.to(torch.int32), None)
    return [
        StepMeta(
            positions=rec.positions.to(torch.int64),
            seq_lens=rec.seq_lens.to(torch.int32),
            slot_mapping=rec.slot_mapping.to(torch.int64),
        )
        for rec in recorder.trace
    ]


class Ascend013Proposer(EagerAdapter):
    """0.13.0's ``MtpProposer._propose`` behind the core ``MtpProposer``'s constructor and trace.

    Eager only (ACL graphs need an NPU). Each call does what 0.13's runner does before ``_propose``:
    step 1, then (when some request verified drafts) ``prepare_inputs_padded`` / ``prepare_inputs``,
    and sets the runner's ``with_prefill`` from the batch."""

    label, graphs_need = "the vllm-ascend 0.13 adapter", "an NPU (ACL graphs)"

    def __init__(self, cfg: ProposerConfig, model, device, ops=None, mode="eager", triton: bool = True):
        super().__init__(cfg, model, device, ops, mode)
        self.triton = triton
        self.model = MlaTinyMtp(model)
        start_fresh(_proposer(cfg))  # one 0.13 proposer serves every run: each starts from its state as built

    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """Draft tokens, int64 [B, K], as 0.13's runner calls ``_propose`` (padded or unpadded)."""
        CoreOps().validate(self.cfg, batch, sampled)
        p, k = _proposer(self.cfg, sampled.is_padded), self.cfg.num_spec_tokens
        if self.trace is not None:
            self.trace.clear()
        self.model.trace, self.model.calls, self.model.metadata = self.trace, 0, []
        nxt = next_tokens(p, batch, sampled, self.cfg.vocab_size)
        if int(batch.num_draft_tokens_cpu.max()) > 0:
            spec_cad, rows, sample, _ = prepare_inputs(p, batch, sampled, nxt.valid_counts, self.triton)
        else:  # no SpecDecodeMetadata: the runner hands the target's rows and metadata as they are
            spec_cad, rows, sample = interop.to_ascend_metadata(batch), torch.arange(batch.num_tokens), None
        p.runner.with_prefill = interop.with_prefill(batch)
        drafts = run_propose(
            p, self.model, spec_cad, batch.token_ids[rows], batch.positions[rows], batch.hidden_states[rows],
            nxt.next_token_ids, sample,
        )  # fmt: skip
        self.logits_calls += k
        return drafts.to(torch.int64).view(batch.num_reqs, k).clone()


def implementation() -> Implementation:
    """The ``vllm_ascend_0_13`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    reason = unavailable_reason()
    if reason:
        raise ImplementationUnavailable("vllm_ascend_0_13", reason)
    return Implementation(
        "vllm_ascend_0_13",
        Ascend013Ops(),
        Ascend013Proposer,
        dict(GATE_SKIPS),
        RULES,
        tuple(DIVERGENCES.values()),
        describe=describe("vllm_ascend_0_13"),
    )
