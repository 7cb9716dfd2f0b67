"""vllm-ascend's ``AscendEagleProposer`` (0.23.0, or main) as an implementation under test (``--impl vllm_ascend``).

``AscendOps`` computes docs/DESIGN.md steps 1-4 with vllm-ascend's own methods
(``prepare_next_token_ids_padded`` / vLLM's ``prepare_next_token_ids_cpu``,
``prepare_inputs_padded`` / ``prepare_inputs``, the first-pass shift of
``set_inputs_first_pass``, the per-step update ``attn_update_stack_num_spec_norm``)
and returns the core's types. ``AscendProposer`` drafts as vllm-ascend's model runner has
its drafter draft: through the runner's own ``propose_draft_token_ids`` (``handoff``: steps
1-3 and the whole ``_propose`` loop, with the arguments the runner derives), with the
simulator's tiny MTP model and paged cache, the draft's attention set up by the drafter's own
``initialize_attn_backend`` (``attn_setup``), behind ``MtpProposer``'s constructor.

``prepare_inputs_padded`` runs vllm-ascend's Triton kernel (in Triton's interpreter
on CPU), what an NPU with triton-ascend runs and so what the gate checks, on a grid
where every program laps (``kernel_grid``); ``AscendOps(triton=False)`` runs its torch
fallback instead, what ``HAS_TRITON = False`` selects in vllm-ascend itself.
What is vllm-ascend's own is here (its padded step-1 and steps-2-3 calls, the
shift, the step update; what differs between 0.23.0 and main, in ``generation``);
the rest is the kit's (``sim.impls.kit``).
Where vllm-ascend differs from the core by design, the difference is named in
``divergences`` (and docs/DIVERGENCES-vllm-ascend.md).
"""

from __future__ import annotations

import dataclasses

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, StepMeta, VerifiedBatch
from mtp.capture_sizes import CaptureSizes
from mtp.config import ProposerConfig
from mtp.trace import Phase
from sim.impls import Implementation
from sim.impls.kit import factory, steps
from sim.impls.kit.ascend import draft_layers, early_copies, interop
from sim.impls.kit.ascend.importing import describe, import_ascend, unavailable_reason
from sim.impls.kit.ascend.kernel_blocks import splitting
from sim.impls.kit.dummy_kv import writes_no_kv
from sim.impls.kit.eager_adapter import EagerAdapter
from sim.impls.kit.fresh_start import start_fresh
from sim.impls.kit.runner_ops import HelperOps
from sim.impls.vllm_ascend import (
    attn_setup,
    branch_divergences,
    divergences,
    extra_rows,
    generation,
    graphs,
    handoff,
    iteration,
    kernel_blocks,
    rejection,
)
from sim.impls.vllm_ascend.build import configured, configured_graph, graphed_model
from sim.impls.vllm_ascend.model import LAYER, AscendSnapshotAttnGroup, draft_model


def _proposer(cfg: ProposerConfig, layers=(LAYER,), attn: str = "gqa"):
    return configured(cfg.num_spec_tokens, cfg.block_size, cfg.max_model_len, cfg.hidden_size, layers, attn, cfg.method)


def next_tokens(p, batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> NextTokens:
    """Step 1 by vllm-ascend: padded takes discard indices and a count; unpadded is vLLM 0.23's."""

    def padded(s):
        idx, n = interop.discard_indices(sampled, batch.query_start_loc.device)
        return generation.next_token_ids_padded(p, batch, sampled.padded, s.requests, s.input_batch, idx, n)

    return steps.next_tokens(p, batch, sampled, vocab_size, padded)


def prepare_inputs(p, batch: VerifiedBatch, sampled: SampledTokens, valid_counts: torch.Tensor, triton: bool):
    """Steps 2-3 by vllm-ascend: (spec metadata, token indices, sample indices or None, rejected counts)."""

    def padded(cad, spec):
        with steps.triton_path(generation.base_module(), triton, batch.num_reqs):
            return p.prepare_inputs_padded(cad, spec, valid_counts)

    return steps.prepare_inputs(p, batch, sampled, generation.runner_metadata(batch), padded)


class AscendOps(HelperOps):
    """Steps 1-4 by vllm-ascend's methods; validation is the core's. ``accepted_seq_lens`` is what
    vllm-ascend's later steps start from: its ``seq_lens`` (padded: not lowered by the rejected count,
    divergence padded-seq-lens-not-lowered)."""

    accepted_field = "seq_lens"
    step_one = staticmethod(next_tokens)
    steps_two_three = staticmethod(prepare_inputs)

    def helpers(self, cfg: ProposerConfig, padded: bool):
        """The shared proposer, one for either mode: vllm-ascend's helpers take the mode per call."""
        return _proposer(cfg)

    def first_pass_input_ids(self, batch: VerifiedBatch, first: FirstPassInputs, nxt: NextTokens) -> torch.Tensor:
        """vllm-ascend's ``set_inputs_first_pass`` on its own buffer (rows it never writes keep old values)."""
        p = configured(2, 16, 64, batch.hidden_states.shape[1])  # sizes unread by the shift
        return steps.shifted_input_ids(p, batch, first, nxt)

    def expand_by_next_token(self, cfg, batch, first, nxt):
        """A draft model's first pass by vllm-ascend's ``set_inputs_first_pass`` (``extra_rows``)."""
        return extra_rows.expand_by_next_token(_proposer(cfg), batch, first, nxt, cfg.max_num_tokens)

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step) -> StepMeta:
        """Step ``step``'s metadata: vllm-ascend's ``attn_update_stack_num_spec_norm`` run ``step - 1`` times."""
        return advance_steps(_proposer(cfg), base_positions, accepted_seq_lens, block_table, int(step))[-1]


def advance_steps(p, base_positions, seq_lens, block_table, step: int) -> list[StepMeta]:
    """Steps 1..``step`` as vllm-ascend's per-step update computes them (step 1: the inputs as given).

    The metadata handed in is what ``_propose`` hands it after the first pass:
    one row per request, ``seq_lens`` and its host mirror, the block table.
    """
    backend = import_ascend("vllm.config")
    utils = import_ascend("vllm_ascend.attention.utils")
    b = base_positions.shape[0]
    seq = seq_lens.to(torch.int32).clone()
    cad = utils.AscendCommonAttentionMetadata(
        query_start_loc=torch.arange(b + 1, dtype=torch.int32, device=seq.device),
        query_start_loc_cpu=torch.arange(b + 1, dtype=torch.int32),
        seq_lens=seq,
        seq_lens_cpu=seq.cpu().clone(),
        num_computed_tokens_cpu=seq.cpu() - 1,  # one row per request (v0.18.0's update copies it)
        num_reqs=b,
        num_actual_tokens=b,
        max_query_len=1,
        max_seq_len=0,
        block_table_tensor=block_table.to(torch.int32).clone(),
        slot_mapping=torch.full((b,), -1, dtype=torch.int64, device=seq.device),
        positions=base_positions.to(torch.int64).clone(),
    )
    group = AscendSnapshotAttnGroup()
    positions = base_positions.to(torch.int32).clone()  # _propose's used_update_positions (self.positions dtype)
    out = [StepMeta(positions=positions.to(torch.int64).clone(), seq_lens=seq.clone(), slot_mapping=cad.slot_mapping)]
    for draft_index in range(1, step):
        cad, _ = generation.update_step(p, draft_index, cad, b, positions, backend.CUDAGraphMode.NONE, group)
        out.append(
            StepMeta(
                positions=cad.positions[:b].to(torch.int64).clone(),
                seq_lens=cad.seq_lens[:b].to(torch.int32).clone(),
                slot_mapping=cad.slot_mapping[:b].to(torch.int64).clone(),
            )
        )
    return out


FULL_UNPADDED = (
    "vllm-ascend refuses full graphs with disable_padded_drafter_batch "
    "(_raise_if_padded_drafter_batch_disabled_and_full_graph_enabled): NotImplementedError"
)


def runner_wide(batch: VerifiedBatch, cfg: ProposerConfig) -> VerifiedBatch:
    """``batch`` with its block table as wide as the runner's (``max_num_blocks_per_req``: enough
    blocks for ``max_model_len``), -1 past each row's blocks. The batch's own is as wide as its longest
    row; a draft whose per-step state runs ahead of its positions (``draft-state-advanced-per-group``)
    looks blocks up past it, where the runner's table has columns and the batch's none."""
    width = -(-cfg.max_model_len // cfg.block_size)
    table = batch.block_table
    if table.shape[1] >= width:
        return batch
    pad = torch.full((table.shape[0], width - table.shape[1]), -1, dtype=table.dtype, device=table.device)
    return dataclasses.replace(batch, block_table=torch.cat([table, pad], dim=1))


class AscendProposer(EagerAdapter):
    """vllm-ascend's ``_propose`` behind ``MtpProposer``'s constructor and trace.
    ``triton``: ``prepare_inputs_padded`` through its Triton kernel, in the interpreter (False: the fallback).

    ``draft_attn_groups=2``: a draft of two layers that form two attention groups (``LAYER`` and
    ``INDEXER_LAYER`` of another backend, in one KV-cache group: ``attn_setup``), the heads of the tiny
    model split over them (``AscendTinyMtp``); eager only.

    ``draft_attn="mla"``: the draft layer is MLA attention, its metadata built by the checkout's
    ``AscendMLAMetadataBuilder`` and read as the MLA kernels read it, RoPE included (``mla``); one
    attention group.

    ``async_scheduling``: the runner schedules asynchronously (``handoff.scheduling``); after each call
    ``handed_on`` holds what it handed its next step (``handoff.handed_on``).

    ``kernel_block_size``: a hybrid target's layout, its blocks split into kernel blocks of this many tokens
    (``kernel_blocks``), the full-graph runner's persistent tables as wide as kernel blocks need.

    ``mode="full"``: vllm-ascend's full-graph drafting (FULL_DECODE_ONLY, ``build.graph_proposer``),
    its ACL graphs on the simulator's recorder (``fake_npu_graphs``): ``capture_all`` captures through
    vllm-ascend's own ``dummy_run`` for every key of its runner's dispatcher, and each call dispatches,
    pads, replays and updates the captured attention parameters (``update_full_graph_params``) by
    vllm-ascend's own code. ``mode="piecewise"`` is refused (``divergences.PIECEWISE``).
    """

    label, graphs_need = "the vllm-ascend adapter", "an NPU (ACL graphs)"

    def __init__(
        self,
        cfg: ProposerConfig,
        model,
        device,
        ops=None,
        mode="eager",
        triton: bool = True,
        capture_sizes=None,
        draft_attn_groups: int = 1,
        draft_attn: str = "gqa",
        async_scheduling: bool = False,
        runner_samples: bool = False,
        kernel_block_size: int = 0,
    ):
        self.mode = str(getattr(mode, "value", mode))
        if self.mode == "piecewise":
            raise ValueError(f"mode='piecewise': {divergences.PIECEWISE}")
        layers = draft_layers.layers_of(draft_attn, draft_attn_groups)
        if self.mode != "eager" and draft_attn_groups > 1:
            raise ValueError(
                f"mode={self.mode!r} with draft_attn_groups={draft_attn_groups}: {divergences.GROUPS_EAGER}"
            )
        if draft_attn not in attn_setup.FAMILIES:
            raise ValueError(f"draft_attn={draft_attn!r}: expected one of {sorted(attn_setup.FAMILIES)}")
        if kernel_block_size and (draft_attn != "gqa" or draft_attn_groups > 1):
            raise ValueError(
                f"kernel_block_size={kernel_block_size} with draft_attn={draft_attn!r}, draft_attn_groups="
                f"{draft_attn_groups}: a hybrid target's kernel blocks are driven for one GQA draft layer"
            )
        self.layers, self.attn = layers, draft_attn
        self.kernel_block_size = kernel_block_size
        if self.mode == "full" and not getattr(device, "supports_graphs", False):
            raise ValueError(f"mode='full': device {getattr(device, 'name', device)} cannot capture graphs")
        super().__init__(cfg, model, device, "eager" if self.mode == "full" else mode)
        self.triton, self.async_scheduling = triton, async_scheduling
        self.handed_on = None  # async scheduling: what the runner handed the last call's next step
        self.runner_samples = runner_samples
        self.runner_sampled = None  # runner_samples: what the runner sampled at the last call
        self.model = draft_model(model, [name for name in self.layers if name != LAYER], cfg.method)
        # one proposer serves every run: each starts from its state as built
        start_fresh(_proposer(cfg, self.layers, self.attn))
        self.graphed = None
        if self.mode == "full":
            sizes = tuple(capture_sizes or CaptureSizes.default(cfg.max_num_tokens))
            self.graphed = configured_graph(cfg, sizes, self.attn, kernel_block_size)
        self._captured = False
        self.dummy_wrote: list[int] = []  # the KV slots the last dummy run wrote (a known defect's, tolerated)

    def _ascend(self):
        p = self.graphed if self.graphed is not None else _proposer(self.cfg, self.layers, self.attn)
        p.model = graphed_model(p, self.model)
        p.runner.model = self.model
        self.model.returns_tuple = p.model_returns_tuple()  # one state on v0.21.0rc and v0.22.1rc (mtp)
        return p

    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """``EagerAdapter.propose`` with, on the simulator, every non-blocking device->host copy that
        any code makes poisoned until synchronized (``early_copies``)."""
        with early_copies.checked(self.device, batch, sampled):
            return super().propose(batch, sampled)

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """The drafts as vllm-ascend's runner has them drafted: its own ``propose_draft_token_ids``
        (``handoff``) on the runner view, padded or unpadded."""
        p = self._ascend()
        with kernel_blocks.split(p, batch, self.kernel_block_size, self.cfg.block_size) as batch:
            return self._propose_as_split(p, batch, sampled, k)

    def _propose_as_split(self, p, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """``_propose`` with the batch's table the runner's (a hybrid target's kernel blocks: ``kernel_blocks``);
        full graphs captured at the first call, under it."""
        if self.graphed is not None:
            if not sampled.is_padded:
                raise NotImplementedError(f"an unpadded call in mode='full': {FULL_UNPADDED}")
            self.capture_all()
        if self.graphed is not None:
            graphs.load_runner(p, batch)
        if len(self.layers) > 1:
            batch = runner_wide(batch, self.cfg)
        p.runner.drafter = handoff.Drafter(p, lambda handed: self._handed(p, batch, handed))
        base = generation.base_module()
        with (
            steps.triton_path(base, self.triton, batch.num_reqs),  # prepare_inputs_padded's kernel, or fallback
            handoff.scheduling(p.runner, self.async_scheduling),
        ):
            self.model.call_slots = []
            if self.runner_samples:
                drafts, self.runner_sampled = iteration.sample_and_propose(
                    p.runner, batch, sampled, k, self.cfg.vocab_size, self.tolerated_kernel_reads
                )
            else:
                drafts = handoff.propose(p.runner, batch, sampled, k, self.cfg.vocab_size)
            if self.async_scheduling:
                self.handed_on = handoff.handed_on(p.runner, batch, drafts)
        if self.graphed is not None:
            torch.npu.current_stream().synchronize()  # the runner's host copy of the drafts waits for the replay
            drafts = drafts[: batch.num_reqs]  # a replay drafts for every request row of its capture
        return drafts

    def _handed(self, p, batch: VerifiedBatch, handed: dict) -> None:
        """What the recording model learns of the runner's hand-off: the first pass's sample rows and
        (graph modes) the batch's rows of a replayed call's records. A draft model's first pass adds rows,
        so the rows it samples are the drafter's own: its ``token_indices_to_sample`` buffer, read when
        the first forward is recorded (``_propose`` has written it by then)."""
        if self.cfg.method == "draft_model":
            self.model.sample_indices = p.token_indices_to_sample[: batch.num_reqs]
        else:
            self.model.sample_indices = handoff.sample_rows(handed)
        extra = self.cfg.extra_rows_per_request * batch.num_reqs  # a draft model's next-token rows
        self.model.real = (batch.num_reqs, handed["target_token_ids"].shape[0] + extra)

    def capture_all(self) -> None:
        """Full-graph mode: every graph of the dispatcher's keys, through vllm-ascend's dummy runs (once)."""
        if self.graphed is None or self._captured:
            return
        self._ascend()
        trace, calls, slots = self.model.trace, self.model.calls, self.model.call_slots  # no call's
        self.model.trace = None
        try:
            with writes_no_kv(self.model), splitting(self.kernel_block_size, self.cfg.block_size):
                graphs.capture_all(self.graphed)
        finally:
            self.model.trace, self.model.calls, self.model.call_slots = trace, calls, slots
        self._captured = True

    def captured_sizes(self) -> dict[Phase, list[int]]:
        """The merged draft graph's sizes: one graph holds the first pass and steps 2..K (which run at
        the first pass's rows, mtp-steps-run-padded-rows), so both phases name the same sizes. None where
        the drafter drafts eagerly under the full-graph target (its ``use_cuda_graph`` False: vllm-ascend
        #14510's draft-model drafter): its calls run at their own rows."""
        if self.graphed is None or not getattr(self.graphed, "use_cuda_graph", True):
            return super().captured_sizes()
        sizes = graphs.captured_sizes(self.graphed)
        return {phase: list(sizes) for phase in Phase}

    @property
    def tolerated_kernel_reads(self) -> tuple:
        """The rejection kernels' reads before their buffer where the checkout's table holds that known
        defect (``rejection-kernels-read-before-their-buffer``): exactly those pass, every other access is
        checked."""
        table = branch_divergences.in_force(generation.name()).DIVERGENCES
        return rejection.READS_BEFORE_CU_NUM_DRAFT_TOKENS if rejection.DEFECT in table else ()

    @property
    def tolerates_dummy_writes(self) -> bool:
        """Whether the checkout's dummy run writes KV at the last call's slots, a known defect
        (``branch_divergences.DUMMY_WRITES_KV``, v0.21.0rc and v0.22.1rc): then exactly those writes pass."""
        return branch_divergences.DUMMY_WRITES_KV.id in branch_divergences.in_force(generation.name()).DIVERGENCES

    def dummy_run(self, size: int) -> None:
        """vllm-ascend's ``dummy_run`` at ``size`` tokens, as its runner issues one (a rank with no requests).
        ``dummy_wrote``: the slots it wrote, where the checkout's dummy run may (``tolerates_dummy_writes``)."""
        self.capture_all()
        before, last_call = self.model.calls, self.model.call_slots
        self.model.trace = None
        tolerated = self.model.call_slots_written() if self.tolerates_dummy_writes else frozenset()
        with writes_no_kv(self.model, tolerated) as written:
            graphs.dummy_run(self._ascend(), size)
        self.model.call_slots, self.dummy_wrote = last_call, sorted(set(written))
        self.logits_calls += self.model.calls - before  # one logits computation per draft-model call


def implementation() -> Implementation:
    """The ``vllm_ascend`` implementation; ``ImplementationUnavailable`` names why it cannot run here."""
    reason = unavailable_reason()  # before the generation is asked
    table = branch_divergences.in_force(generation.name()) if reason is None else divergences
    return factory.implementation("vllm_ascend", lambda: reason, AscendOps(), AscendProposer, table, describe=describe)
