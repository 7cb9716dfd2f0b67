"""vllm-ascend's Model Runner V2 MTP speculator as an implementation under test (``--impl vllm_ascend_mrv2``).

On main it is ``AscendMTPSpeculator`` (``AscendAutoRegressiveSpeculator`` on vLLM 0.27.1's
``MTPSpeculator``), on 0.23.0 ``AscendEagleSpeculator`` (on vLLM 0.23.0's ``EagleSpeculator``):
whatever vllm-ascend's ``init_speculator`` returns for ``method == "mtp"`` (``generation``). Both run
vLLM's MRV2 loop (``AutoRegressiveSpeculator.propose``: the prefill kernel, the decode kernels,
``BlockTables.compute_slot_mappings``) with vllm-ascend's overrides: its ``build_attn_metadata``,
its host-length updates around each draft step, its ``torch.gather``.

``AscendMrv2Proposer`` drives the whole ``propose`` loop with the simulator's tiny MTP model and paged
cache behind ``MtpProposer``'s constructor; its attention reads the ``AscendMetadata`` an Ascend
backend reads (``model``). ``AscendMrv2Ops`` computes steps 1-4 for the single-call properties
with the same functions (vLLM's kernels, vllm-ascend's metadata build and host-length updates).
The runner's side (its input batch, the sampler's counts, the request states) is the kit's
(``sim.impls.kit.mrv2_runner``), in vllm-ascend's own ``AscendInputBatch``.
Where it differs from the core, the difference is named in ``divergences``
(docs/DIVERGENCES-vllm-ascend-mrv2.md); what it cannot run is in ``LACKS``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import SampledTokens, StepMeta, VerifiedBatch
from mtp.capture_sizes import CaptureSizes
from mtp.config import ProposerConfig
from mtp.ops import CoreOps, PreparedCall
from mtp.trace import Phase
from sim.impls import Implementation, NotInThisCheckout
from sim.impls.kit import factory, mrv2_runner
from sim.impls.kit.ascend import draft_layers, early_copies, interop
from sim.impls.kit.ascend.importing import describe, import_ascend
from sim.impls.kit.ascend.kernel_blocks import splitting
from sim.impls.kit.dummy_kv import DummyRunWroteKv, writes_no_kv
from sim.impls.kit.eager_adapter import EagerAdapter
from sim.impls.vllm_ascend_mrv2 import build, crashes, divergences, generation, graphs, handoff, host_lengths, sampling
from sim.impls.vllm_ascend_mrv2.generation import AR, unavailable_reason
from sim.impls.vllm_ascend_mrv2.model import (
    LAYER,
    AscendMetadataGroup,
    AscendMrv2TinyMtp,
    attention_meta,
    kv_cache_config,
)

ATTN_UTILS, INPUT_BATCH = "vllm_ascend.worker.v2.attn_utils", "vllm_ascend.worker.v2.input_batch"


def runner_inputs(
    batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int, max_num_reqs: int, vllm_config, device
):
    """The kit's runner inputs in vllm-ascend's own ``AscendInputBatch``, with what it adds: ``seq_lens_np``
    (the host lengths its speculator reads, and writes: the runner's whole buffer, 0 past the batch's requests),
    as its runner hands them from its device's counts on ``device`` (``host_lengths``), and the ``attn_state`` its
    runner's ``build_attn_state`` gives the step (of ``vllm_config``)."""
    seq_np = host_lengths.seq_lens_as_handed(device, batch, max_num_reqs)
    query = np.diff(np.asarray(batch.query_start_loc_cpu, dtype=np.int32))
    state = import_ascend(ATTN_UTILS).build_attn_state(
        vllm_config, seq_np, batch.num_reqs, query, query - np.asarray(batch.num_draft_tokens_cpu, dtype=np.int32)
    )
    cls = import_ascend(INPUT_BATCH).AscendInputBatch
    return mrv2_runner.runner_inputs(
        batch, sampled, vocab_size, max_num_reqs, cls, seq_lens_np=seq_np, attn_state=state
    )


def wired(cfg: ProposerConfig, block_table: torch.Tensor, model=None, groups=None, graphed=None, kernel_block_size=0):
    """The shared speculator at ``cfg``'s sizes, wired as ``load_model`` and ``set_attn`` would wire it (``groups``:
    the draft's attention groups, one per layer, in one KV-cache group; None: one GQA layer's); ``graphed``: a
    full-graph speculator instead (``graphs``), whose block tables stay in place (``graphs.hold``);
    ``kernel_block_size``: ``block_table`` is a hybrid target's table of kernel blocks of that many tokens."""
    if graphed is None:
        spec = build.configured(cfg.num_spec_tokens, cfg.max_model_len, cfg.hidden_size, cfg.method)
    else:
        spec = mrv2_runner.resize(graphed, build.WHO, cfg.num_spec_tokens, cfg.max_model_len)
    spec.model = model
    groups = groups or draft_groups(cfg.block_size, cfg.hidden_size, cfg.num_spec_tokens, cfg.method)
    generation.set_attn_architecture(spec, groups[0].attn)
    layers = [name for group in groups for name in group.layer_names]
    spec.attn_groups = [list(groups)]
    spec.kv_cache_config = kv_cache_config(layers)
    spec.draft_attn_layer_names = set(layers)
    if graphed is None:
        spec.block_tables = mrv2_runner.block_tables(
            block_table, cfg.block_size, spec.max_num_tokens, kernel_block_size
        )
    return spec


@functools.lru_cache(maxsize=32)
def draft_groups(
    block_size: int, hidden_size: int, num_spec_tokens: int, method: str = "mtp", attn: str = "gqa", count: int = 1
) -> tuple:
    """The draft's ``count`` attention groups at these sizes (``draft_layers.DRAFT_LAYERS``: a layer each, the
    first of family ``attn``, the second GQA), each builder the checkout's (``AscendMetadataGroup``), made once, as
    a runner makes its builders once."""
    config = build.speculator(hidden_size, method).vllm_config
    return tuple(
        AscendMetadataGroup(config, block_size, hidden_size, num_spec_tokens, attn if layer == LAYER else "gqa", layer)
        for layer in draft_layers.DRAFT_LAYERS[count]
    )


@functools.lru_cache(maxsize=16)
def _made_buffers(num_reqs: int, num_tokens: int):
    inputs = import_ascend("vllm_ascend.worker.v2.input_batch")
    return inputs.AscendInputBuffers(max_num_reqs=num_reqs, max_num_tokens=max(num_tokens, 1), device=build.CPU)


def _buffers(num_reqs: int, num_tokens: int):
    """vllm-ascend's ``AscendInputBuffers`` of that size, as a newly built speculator holds them (zeros):
    made once per size, as the runner makes them once (its constructor reads a host copy back)."""
    buffers = _made_buffers(num_reqs, num_tokens)
    for name in ("input_ids", "positions", "seq_lens", "query_start_loc"):
        getattr(buffers, name).zero_()
    return buffers


class StepRecorder(torch.nn.Module):
    """The draft model ``AscendMrv2Ops`` hands the speculator to learn step metadata: it records what each
    forward's attention was handed and returns zeros (plumbing: none of its drafts is compared)."""

    def __init__(self, hidden_size: int, vocab_size: int):
        super().__init__()
        self.hidden_size, self.vocab_size = hidden_size, vocab_size
        self.seen: list[StepMeta] = []

    def forward(self, input_ids, positions, hidden_states=None, inputs_embeds=None, **_):
        context = import_ascend("vllm.forward_context").get_forward_context()
        attn = attention_meta(context.attn_metadata[LAYER])
        n = attn.seq_lens.shape[0]
        meta = StepMeta(
            positions[:n].to(torch.int64).clone(), attn.seq_lens.clone(), attn.slot_mapping[:n].to(torch.int64).clone()
        )
        self.seen.append(meta)
        out = torch.zeros(input_ids.shape[0], self.hidden_size)
        return out, out

    def compute_logits(self, hidden_states):
        return torch.zeros(hidden_states.shape[0], self.vocab_size)


@contextlib.contextmanager
def fresh_input_buffers(spec):
    """The shared speculator on fresh input buffers for one ops call, its own put back after."""
    own, spec.input_buffers = spec.input_buffers, _buffers(spec.max_num_reqs, spec.max_num_tokens)
    try:
        yield spec.input_buffers
    finally:
        spec.input_buffers = own


class AscendMrv2Ops(CoreOps):
    """Steps 1-4 by the speculator's own functions; validation and the core's wiring are the core's.

    Steps 1-3: the runner's counts and vLLM's prefill kernel (the kit's ``prepared_call``), with the host
    lengths later steps advance from (``accepted_seq_lens``): the target's ``seq_lens`` (``seq_lens_np``,
    ``seq_lens_cpu_upper_bound``), never lowered (divergence ``host-seq-lens-not-lowered``). Step 4: the
    speculator's own decode loop, vLLM's kernels and ``compute_slot_mappings`` with vllm-ascend's
    metadata build and host-length updates, on a draft model that records what each step's attention was handed (``StepRecorder``)."""

    def __init__(self):
        self._last: tuple | None = None  # (the inputs, every step's metadata) of the last decode loop run

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        self.validate(cfg, batch, sampled)
        ar = import_ascend(AR)
        return mrv2_runner.prepared_call(ar.prepare_prefill_inputs, _buffers, cfg, batch, sampled, lowered=False)

    def advance_step(self, cfg, base_positions, accepted_seq_lens, block_table, step) -> StepMeta:
        """Draft step ``step``'s metadata: ``prepare_decode_inputs``, then the speculator's
        ``_multi_step_decode`` as ``propose`` runs it, read at that step's forward. One loop serves
        every step of the same inputs (the gate asks for steps 2..K in turn)."""
        inputs = (cfg, base_positions.clone(), accepted_seq_lens.clone(), block_table.clone())
        last = self._last
        if last is None or not (last[0][0] == cfg and all(torch.equal(x, y) for x, y in zip(last[0][1:], inputs[1:]))):
            self._last = last = (inputs, decode_loop(cfg, base_positions, accepted_seq_lens, block_table))
        return last[1][int(step) - 2]


def decode_loop(cfg: ProposerConfig, base_positions, accepted_seq_lens, block_table) -> list[StepMeta]:
    """Steps 2..K's metadata as the speculator's decode loop hands its attention, from the first pass's
    base positions and host lengths."""
    ar, dp = import_ascend(AR), import_ascend("vllm.v1.worker.gpu.dp_utils")
    b = base_positions.shape[0]
    recorder = StepRecorder(cfg.hidden_size, cfg.vocab_size)
    spec = wired(cfg, block_table, recorder)
    host = accepted_seq_lens.to(torch.int32).cpu()
    zeros = torch.zeros(spec.max_num_reqs)
    with fresh_input_buffers(spec) as buffers:
        spec.input_batch = SimpleNamespace(
            num_reqs=b, seq_lens_np=host.numpy().copy(), seq_lens_cpu_upper_bound=host.clone(),
            is_prefilling_np=np.zeros(b, dtype=bool),
        )  # fmt: skip
        # what propose sets on entry from the runner's host bound
        spec.draft_max_seq_len = min(int(host.max()) + spec.num_speculative_steps, spec.max_model_len)
        spec._copy_request_inputs(b, mrv2_runner.state_rows(b), zeros, zeros.to(torch.int64))
        buffers.positions[:b] = base_positions
        ar.prepare_decode_inputs(
            spec.draft_tokens[:b, 0], host, torch.zeros(b, dtype=torch.int32), buffers, spec.max_model_len,
            spec.max_num_reqs,
        )  # fmt: skip
        desc, _ = dp.dispatch_cg_and_sync_dp(
            spec.decode_cudagraph_manager, b, b, uniform_token_count=1, dp_size=spec.dp_size,
            dp_rank=spec.dp_rank, need_eager=True,
        )  # fmt: skip
        with generation.propose_context(spec):
            generation.multi_step_decode(spec, b, desc, host)
    return recorder.seen


class AscendMrv2Proposer(EagerAdapter):
    """vllm-ascend's MRV2 ``propose`` behind ``MtpProposer``'s constructor and trace.

    ``mode="full"``: FULL_DECODE_ONLY as its runner captures and replays it (``graphs``: the decode steps'
    merged graph by vllm-ascend's own manager, captured at the first call; the first pass eager), on a
    checkout that deploys that manager, for one draft attention group (GQA, MLA or SFA); each call under the
    simulator's early-read check (``early_copies``), which tells the host code the capture runs through from device
    reads. ``kernel_block_size``: a hybrid target's layout, its blocks split into kernel blocks of this many tokens
    (Qwen3.5's), the table the speculator and its builders are handed one of kernel blocks."""

    label, graphs_need = "the vllm-ascend MRV2 adapter", "an NPU (ACL graphs)"
    # its runner hands every next step the same, synchronous or not (``handed_on``: ``handoff.handed_on``, compared by
    # the checker at every call)
    hands_on_every_step = True
    books_on_the_device = True  # its runner books what it samples in its request states, under either schedule

    def __init__(
        self,
        cfg: ProposerConfig,
        model,
        device,
        ops=None,
        mode="eager",
        draft_attn: str = "gqa",
        draft_attn_groups=1,
        capture_sizes=None,
        kernel_block_size=0,
        async_scheduling=False,
        runner_samples=False,
    ):
        # ``async_scheduling``: its runner takes every count from its device and replaces the scheduler's placeholders
        # there, so it hands the speculator and the next step the same as under a synchronous schedule
        self.async_scheduling, self.runner_samples = async_scheduling, runner_samples
        self.runner_sampled = None  # runner_samples: what the runner sampled and holds at the last call
        self.mode = str(getattr(mode, "value", mode))
        if self.mode == "full":
            refused = graphs.lacks() or (draft_attn_groups > 1 and divergences.FULL_GRAPHS_ONE_GROUP)
            if refused or not getattr(device, "supports_graphs", False):
                raise ValueError(f"mode='full': {refused or f'device {device.name} cannot capture graphs'}")
        layers = draft_layers.layers_of(draft_attn, draft_attn_groups)
        super().__init__(cfg, model, device, "eager" if self.mode == "full" else mode)
        self.model = AscendMrv2TinyMtp(model, layers[1:])
        sizes = (cfg.block_size, cfg.hidden_size, cfg.num_spec_tokens, cfg.method)
        self.groups = draft_groups(*sizes, draft_attn, draft_attn_groups)
        self.graphed, self.kernel_block_size = None, kernel_block_size
        self.handed_on = None  # what the runner handed the last call's next step (``handoff.handed_on``)
        if self.mode == "full":
            captured = tuple(sorted(set(capture_sizes or CaptureSizes.default(cfg.max_num_tokens))))
            self.graphed = graphs.speculator(cfg.hidden_size, cfg.num_spec_tokens, captured, cfg.method)
            graphs.fresh(self.graphed, cfg.block_size, cfg.max_model_len, kernel_block_size)  # a run captures its own
        else:  # a serving run starts on new buffers
            mrv2_runner.start_fresh(build.speculator(cfg.hidden_size, cfg.method))

    def _propose(self, batch: VerifiedBatch, sampled: SampledTokens, k: int) -> torch.Tensor:
        """The speculator's ``propose`` as vllm-ascend's MRV2 runner calls it after rejection sampling; for a hybrid
        target (``kernel_block_size``), on the runner's table of kernel blocks (``mrv2_runner.kernel_table``)."""
        kernel = self.kernel_block_size
        if kernel:
            table = mrv2_runner.kernel_table(batch.block_table, self.cfg.block_size, kernel)
            batch = dataclasses.replace(batch, block_table=table)
        with splitting(kernel, self.cfg.block_size):
            return self._propose_on_the_runners_table(batch, sampled)

    def _propose_on_the_runners_table(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        spec = wired(self.cfg, batch.block_table, self.model, self.groups, self.graphed, self.kernel_block_size)
        if self.graphed is not None:  # captured as the runner captures at start-up, before any batch is in place
            self._capture(spec)
            graphs.hold(spec, batch.block_table)
        run = runner_inputs(batch, sampled, self.cfg.vocab_size, spec.max_num_reqs, spec.vllm_config, self.device)
        self.model.sample_indices = spec.last_token_indices[: batch.num_reqs]  # written by the prefill kernel
        # the target's metadata, as the runner's prepare_attn builds it: its host lengths those the runner handed
        handed = run.input_batch.seq_lens_np[: batch.num_reqs]
        target = self.groups[0].build(0, interop.to_ascend_metadata(batch, handed))
        layers = [name for g in self.groups for name in g.layer_names]
        if self.graphed is not None:
            self.model.num_reqs = batch.num_reqs
            spec.model_state.attn_metadata = dict.fromkeys(layers, target)  # what the runner's prepare_attn left there
        sampler = None  # the runner that sampled the call, whose request states the next step is prepared from
        if self.runner_samples:  # its runner's sample_tokens, whose speculator call dispatches as the runner's
            drafts, self.runner_sampled, sampler = sampling.sample_and_propose(
                spec, run, batch, sampled, target, layers, self.cfg.vocab_size, self.device, self.async_scheduling
            )
        elif self.graphed is None:  # eager dispatch without a graph manager (dispatch_cg_and_sync_dp's need_eager)
            drafts = mrv2_runner.propose(spec, run, batch, target, layers)
        else:
            with early_copies.checked(self.device, batch, sampled):
                drafts = mrv2_runner.propose(spec, run, batch, target, layers, is_profile=False)
                torch.npu.current_stream().synchronize()  # the runner's host copy of the drafts waits for the replay
        self.handed_on = handoff.handed_on(self.device, batch, sampled, run, drafts, self.cfg.vocab_size, sampler)
        return drafts

    def _capture(self, spec) -> None:
        """The decode graphs at the first call (``graphs.capture``), their warm-up and captured forwards no call's."""
        trace, calls = self.model.trace, self.model.calls
        self.model.trace = None
        try:
            # tells the host code the capture runs through from device reads; its dummy batch is no call's
            with early_copies.checked(self.device), splitting(self.kernel_block_size, self.cfg.block_size, False):
                graphs.capture(spec, self.groups[0].backend)
        finally:
            self.model.trace, self.model.calls = trace, calls

    @property
    def tolerates_dummy_writes(self) -> bool:
        """Whether the checkout's dummy run writes draft KV into the blocks its request-state rows last held, a
        known defect (``divergences.DUMMY_WRITES_KV``, main): then exactly writes there pass."""
        return divergences.DUMMY_WRITES_KV.id in divergences.in_force(generation.name()).DIVERGENCES

    def dummy_run(self, size: int) -> None:
        """The MRV2 runner's dummy run at ``size`` tokens (``graphs.dummy_run``), full graphs only: a rank with no
        requests replaying the decode graph its peers replay, writing no KV (``dummy_kv``) but where the checkout's
        known defect writes it, exactly there (``dummy_wrote``: the slots it wrote there)."""
        if self.graphed is None:
            return super().dummy_run(size)
        spec = wired(self.cfg, torch.zeros(1, 1, dtype=torch.int32), self.model, self.groups, self.graphed)
        self._capture(spec)
        before, trace = self.model.calls, self.model.trace
        self.model.trace = None
        whole = crashes.sidestepped(divergences.DUMMY_SEQ_LENS.id)
        # tolerated: the blocks of every row, read before the run; past the rows its decode graph ran, checked after
        tolerated = frozenset()
        if self.tolerates_dummy_writes:
            tolerated = graphs.rows_blocks_slots(spec, spec.max_num_reqs, self.cfg.block_size)
        try:
            with early_copies.checked(self.device), splitting(self.kernel_block_size, self.cfg.block_size, False):
                with writes_no_kv(self.model, tolerated) as written:
                    buffers = _buffers(spec.max_num_reqs, spec.max_num_tokens)
                    rows = graphs.dummy_run(spec, size, self.hidden_dtype, buffers, whole)
                    torch.npu.current_stream().synchronize()
        finally:
            self.model.trace = trace
        outside = set(written) - graphs.rows_blocks_slots(spec, rows, self.cfg.block_size)
        if outside:
            raise DummyRunWroteKv(f"a dummy run wrote KV at {sorted(outside)[:8]}, past the blocks of its {rows} rows")
        self.dummy_wrote = sorted(written)
        self.logits_calls += self.model.calls - before  # one logits computation per draft-model call

    def captured_sizes(self) -> dict[Phase, list[int]]:
        """Full graphs: the decode steps' graph sizes (the first pass runs eagerly)."""
        if self.graphed is None:
            return super().captured_sizes()
        return {Phase.FIRST: [], Phase.STEP: graphs.captured_sizes(self.graphed)}


def implementation() -> Implementation:
    """The ``vllm_ascend_mrv2`` implementation; ``ImplementationUnavailable`` names why it cannot run here,
    ``NotInThisCheckout`` where the checkout's branch has no MRV2 speculator that runs (``NOT_IN_CHECKOUT``)."""
    absent = generation.not_in_checkout()
    if absent:
        raise NotInThisCheckout("vllm_ascend_mrv2", absent)
    reason = unavailable_reason()  # before the generation is asked
    table = divergences.in_force(generation.name()) if reason is None else divergences
    return factory.implementation(
        "vllm_ascend_mrv2", lambda: reason, AscendMrv2Ops(), AscendMrv2Proposer, table,
        describe=lambda: describe("vllm_ascend_mrv2"),
    )  # fmt: skip
