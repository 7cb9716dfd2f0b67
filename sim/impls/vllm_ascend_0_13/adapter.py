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
What is 0.13's own is here (its padded step-1 and steps-2-3 calls, ``_propose`` run as a recorder,
the runner's ``with_prefill``); the rest is the kit's (``sim.impls.kit``).
Where 0.13.0 differs from the core, the difference is named in ``divergences``
(docs/DIVERGENCES-vllm-ascend-0.13.md).
"""

from __future__ import annotations

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from sim.impls import Implementation
from sim.impls.kit import factory, steps
from sim.impls.kit.ascend.importing import describe
from sim.impls.kit.eager_adapter import EagerAdapter
from sim.impls.kit.fresh_start import start_fresh
from sim.impls.kit.runner_ops import HelperOps
from sim.impls.kit.vllm_types import GREEDY
from sim.impls.vllm_ascend_0_13 import divergences, interop
from sim.impls.vllm_ascend_0_13.build import configured
from sim.impls.vllm_ascend_0_13.importing import import_ascend, unavailable_reason
from sim.impls.vllm_ascend_0_13.model import LAYER, MlaTinyMtp


def _proposer(cfg: ProposerConfig, padded: bool = True, num_spec_tokens: int | None = None):
    return configured(
        num_spec_tokens or cfg.num_spec_tokens, cfg.max_model_len, cfg.hidden_size, padded, cfg.block_size
    )


def next_tokens(p, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> NextTokens:
    """Step 1 by 0.13: padded takes the target's metadata, discard indices and a count; unpadded is vLLM's."""

    def padded(s):
        idx, n = interop.discard_indices(sampled, batch.query_start_loc.device)
        cad = interop.to_ascend_metadata(batch)
        return p.prepare_next_token_ids_padded(cad, sampled.padded, s.requests, s.input_batch, idx, n)

    return steps.next_tokens(p, batch, sampled, vocab_size, padded)


def prepare_inputs(p, batch: VerifiedBatch, sampled: SampledTokens, valid_counts: torch.Tensor, triton: bool):
    """Steps 2-3 by 0.13: (spec metadata, token indices, sample indices or None, rejected counts).

    Neither 0.13 helper returns the rejected counts: padded, they are what the sample rows
    were lowered by (``query_start_loc[r+1] - 1 - sample[r]``); unpadded, what ``seq_lens`` was."""

    def padded(cad, spec):
        with steps.triton_path(import_ascend("vllm_ascend.spec_decode.eagle_proposer"), triton, batch.num_reqs):
            spec_cad, rows, sample = p.prepare_inputs_padded(cad, spec, valid_counts)
        return spec_cad, rows, sample, (spec_cad.query_start_loc[1:] - 1 - sample).to(torch.int32)

    return steps.prepare_inputs(p, batch, sampled, interop.to_ascend_metadata(batch), padded)


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


class Ascend013Ops(HelperOps):
    """Steps 1-4 by vllm-ascend 0.13.0's code; validation is the core's. ``accepted_seq_lens`` is what
    0.13's later steps start from: the MLA metadata's ``seq_lens``, which its builder takes from
    ``seq_lens_cpu`` (padded: not lowered by the rejected count)."""

    accepted_field = "seq_lens_cpu"
    helpers = staticmethod(_proposer)
    step_one = staticmethod(next_tokens)
    steps_two_three = staticmethod(prepare_inputs)

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


def draft_steps(cfg: ProposerConfig, base_positions, seq_lens, block_table, step: int, recorder=None) -> list[StepMeta]:
    """Steps 1..``step`` of ``_propose`` from a decode batch of one token per request (step 1: as given)."""
    b = base_positions.shape[0]
    p = configured(step, cfg.max_model_len, cfg.hidden_size, block_size=cfg.block_size)
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
        super().__init__(cfg, model, device, mode)
        self.triton = triton
        self.model = MlaTinyMtp(model)
        start_fresh(_proposer(cfg))  # one 0.13 proposer serves every run: each starts from its state as built

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """0.13's ``_propose`` as its runner calls it (padded or unpadded)."""
        p = _proposer(self.cfg, sampled.is_padded)
        self.model.metadata = []
        nxt = next_tokens(p, batch, sampled, self.cfg.vocab_size)
        if int(batch.num_draft_tokens_cpu.max()) > 0:
            spec_cad, rows, sample, _ = prepare_inputs(p, batch, sampled, nxt.valid_counts, self.triton)
        else:  # no SpecDecodeMetadata: the runner hands the target's rows and metadata as they are
            spec_cad, rows, sample = interop.to_ascend_metadata(batch), torch.arange(batch.num_tokens), None
        p.runner.with_prefill = interop.with_prefill(batch)
        return run_propose(
            p, self.model, spec_cad, batch.token_ids[rows], batch.positions[rows], batch.hidden_states[rows],
            nxt.next_token_ids, sample,
        )  # fmt: skip


def implementation() -> Implementation:
    """The ``vllm_ascend_0_13`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    return factory.implementation(
        "vllm_ascend_0_13",
        unavailable_reason,
        Ascend013Ops(),
        Ascend013Proposer,
        divergences,
        describe=lambda: describe("vllm_ascend_0_13"),
    )
