"""vLLM 0.33.0's Model Runner V2 ``MTPSpeculator`` as an implementation under test (``--impl vllm_mrv2``).

MRV2 has no ``prepare_inputs`` to wrap: steps 1-3 are one Triton kernel
(``_prepare_prefill_inputs_kernel``: the next token, the sample row, the shifted ids and copied
positions), step 4 two more (``_prepare_decode_inputs_kernel`` for draft step 2,
``_update_draft_inputs_kernel`` for each later one) and ``BlockTables.compute_slot_mappings``.
``Mrv2Ops`` runs exactly those functions of vLLM, interpreted on CPU (``TRITON_INTERPRET=1``),
and returns the core's types, so the gate's single-call properties run on MRV2's own
preparation; validation is the core's (MRV2 validates nothing: the runner's batch is trusted).
``Mrv2Proposer`` drives the whole ``MTPSpeculator.propose`` loop with the simulator's tiny MTP
model and paged cache, behind ``MtpProposer``'s constructor.

Where MRV2 differs by design, the difference is named in ``sim.impls.vllm_mrv2.divergences``
(docs/DIVERGENCES-vllm-mrv2.md) and modelled in its ``RULES``; what it cannot run is in ``LACKS``.
"""

from __future__ import annotations

import torch

from mtp.batch import SampledTokens, StepMeta, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.ops import CoreOps, PreparedCall
from sim.impls import Implementation
from sim.impls.kit import factory, mrv2_runner
from sim.impls.kit import vllm_interop as interop
from sim.impls.kit.eager_adapter import EagerAdapter
from sim.impls.kit.mrv2_runner import runner_inputs
from sim.impls.kit.vllm_model import LAYER, VllmTinyMtp
from sim.impls.vllm_mrv2 import build, divergences
from sim.impls.vllm_mrv2.model import KV_CACHE_CONFIG, RecordingAttnGroup

SPEC = "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator"


def _buffers(num_reqs: int, num_tokens: int):
    return interop.import_vllm("vllm.v1.worker.gpu.input_batch").InputBuffers(
        max_num_reqs=num_reqs, max_num_tokens=max(num_tokens, 1), device=build.CPU
    )


class Mrv2Ops(CoreOps):
    """Steps 1-4 by MRV2's kernels on fresh buffers; validation and the step wiring are the core's."""

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        self.validate(cfg, batch, sampled)
        spec = interop.import_vllm(SPEC)
        return mrv2_runner.prepared_call(spec.prepare_prefill_inputs, _buffers, cfg, batch, sampled)

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step) -> StepMeta:
        """Draft step ``step``'s metadata: ``prepare_decode_inputs`` (step 2), then ``update_draft_inputs``
        once per later step, then the slots by ``BlockTables.compute_slot_mappings``, as ``propose`` runs them."""
        spec = interop.import_vllm(SPEC)
        b, step = base_positions.shape[0], int(step)
        buffers = _buffers(b, b)
        buffers.positions[:b] = base_positions
        drafts = torch.zeros(b, max(step, 2), dtype=torch.int64)
        sample_src = torch.zeros(b, dtype=torch.int64)
        hidden = torch.zeros(b, 1)
        spec.prepare_decode_inputs(
            drafts[:, 0], accepted_seq_lens.to(torch.int32), torch.zeros(b, dtype=torch.int32), buffers,
            sample_src, cfg.max_model_len, b,
        )  # fmt: skip
        for s in range(1, step - 1):
            spec.update_draft_inputs(
                drafts[:, 0].clone(), torch.tensor(s, dtype=torch.int64), hidden, drafts, hidden.clone(), buffers,
                sample_src, b, cfg.max_model_len, step,
            )  # fmt: skip
        tables = build.block_tables(block_table, cfg.block_size, b)
        slots = tables.compute_slot_mappings(
            mrv2_runner.state_rows(b), buffers.query_start_loc[: b + 1], buffers.positions[:b], b
        )
        return StepMeta(
            positions=buffers.positions[:b].clone(),
            seq_lens=buffers.seq_lens[:b].clone(),
            slot_mapping=slots[0].clone(),
        )


class Mrv2Proposer(EagerAdapter):
    """MRV2's ``MTPSpeculator.propose`` behind ``MtpProposer``'s constructor and trace (eager only)."""

    label, graphs_need = "the vLLM MRV2 adapter", "a GPU (CUDA graphs)"

    def __init__(self, cfg: ProposerConfig, model, device, ops=None, mode="eager"):
        super().__init__(cfg, model, device, mode)
        self.model = VllmTinyMtp(model)
        self.attn_group = RecordingAttnGroup()
        # a serving run starts on a new speculator's buffers
        build.start_fresh(build.speculator(cfg.hidden_size, cfg.method))

    def _speculator(self, batch: VerifiedBatch):
        spec = build.configured(self.cfg.num_spec_tokens, self.cfg.max_model_len, self.cfg.hidden_size, self.cfg.method)
        spec.model = self.model
        spec.attn_groups = [[self.attn_group]]
        spec.kv_cache_config = KV_CACHE_CONFIG
        spec.draft_attn_layer_names = {LAYER}
        spec.block_tables = build.block_tables(batch.block_table, self.cfg.block_size, spec.max_num_tokens)
        return spec

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """MRV2's ``propose`` as its runner calls it after rejection sampling."""
        spec = self._speculator(batch)
        run = runner_inputs(batch, sampled, self.cfg.vocab_size, spec.max_num_reqs)
        self.model.sample_indices = spec.last_token_indices[: batch.num_reqs]  # written by the prefill kernel
        target = self.attn_group.build_metadata(interop.to_common_attn_metadata(batch))  # the target's metadata
        # is_profile: in 0.33 its only effect is eager dispatch (need_eager)
        return mrv2_runner.propose(spec, run, batch, target, LAYER, num_speculative_tokens=k)


def implementation() -> Implementation:
    """The ``vllm_mrv2`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    return factory.implementation("vllm_mrv2", interop.unavailable_reason, Mrv2Ops(), Mrv2Proposer, divergences)
