"""The MTP proposer: K drafts per request from one verified batch.

``CoreOps`` prepares the inputs (docs/DESIGN.md steps 1-3) into persistent
buffers sized from the config. The first pass runs the draft model over every
kept row and drafts token 1 at each request's sample row; steps 2..K run one
row per request. Three graph modes run the same phase functions:

- ``eager``: no graphs, no padding;
- ``piecewise``: the model forward captured per size, the metadata prepared
  and the logits computed outside the graph;
- ``full``: each whole phase (metadata, forward, logits) captured per size.

In graph modes the token count (first pass) and request count (later steps)
are padded up to a captured size; padded rows write no KV (slot -1) and
their outputs are ignored. Buffers are only ever written in place, as a
replay reads the addresses it was captured with.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import torch

from mtp.batch import SampledTokens, VerifiedBatch
from mtp.capture_sizes import CaptureSizes
from mtp.config import ProposerConfig
from mtp.model import AttentionMeta, DraftModel
from mtp.mrope import advance_mrope
from mtp.ops import CoreOps
from mtp.prepare import PADDING_SLOT
from mtp.trace import Phase, StepRecord

if TYPE_CHECKING:
    from devices import Device


class GraphNotCaptured(LookupError):
    """A graph-mode call padded to a size for which no graph was captured."""


class GraphMode(str, Enum):
    EAGER = "eager"
    PIECEWISE = "piecewise"
    FULL = "full"


FIRST, STEP = Phase.FIRST, Phase.STEP


class MtpProposer:
    """Drafts ``cfg.num_spec_tokens`` tokens per request with ``model`` on ``device``.

    A call that fails validation raises ``ValueError`` before any buffer is
    written, so the proposer stays usable.
    """

    def __init__(
        self,
        cfg: ProposerConfig,
        model: DraftModel,
        device: Device,
        ops: CoreOps | None = None,
        mode: GraphMode | str = GraphMode.EAGER,
        capture_sizes: list[int] | None = None,
    ):
        if model.hidden_size != cfg.hidden_size:
            raise ValueError(f"model.hidden_size={model.hidden_size!r}: config says {cfg.hidden_size}")
        if cfg.method == "eagle3" and not callable(getattr(model, "combine_hidden_states", None)):
            raise ValueError(f"method={cfg.method!r}: the draft model has no combine_hidden_states")
        self.cfg, self.model, self.device = cfg, model, device
        self.mode = GraphMode(mode)
        if self.mode is not GraphMode.EAGER and not device.supports_graphs:
            raise ValueError(f"mode={self.mode.value!r}: device {device.name} cannot capture graphs")
        self.ops = ops or CoreOps()
        sizes = list(capture_sizes or CaptureSizes.default(cfg.max_num_tokens))
        # The first pass pads tokens, later steps pad requests: each within its buffers.
        self.sizes = {FIRST: CaptureSizes(sizes, cfg.max_num_tokens), STEP: CaptureSizes(sizes, cfg.max_num_reqs)}
        self.graphs: dict[tuple[str, int], tuple] = {}
        self.logits_calls = 0  # logit computations issued (phase runs that sample)
        self.trace: list[StepRecord] | None = None
        self._may_capture = False
        self._captured = False  # set once capture_all has run, even if it captured nothing
        self.in_capture = False  # inside a device capture: no host reads allowed
        # no mutate: every call and every dummy run set these two before they are read
        self._batch_width = 0  # block-table columns of the current batch  # pragma: no mutate
        self._num_reqs = cfg.max_num_reqs  # requests of the current batch (a dummy run: every row)  # pragma: no mutate
        self._alloc()

    def _alloc(self) -> None:
        cfg, dev = self.cfg, self.device.torch_device
        n, b = cfg.max_num_tokens, cfg.max_num_reqs
        self.max_blocks = -(-(cfg.max_model_len + cfg.num_spec_tokens) // cfg.block_size)
        self.input_ids = torch.zeros(n, dtype=torch.int32, device=dev)
        self.positions = torch.zeros(n, dtype=torch.int64, device=dev)
        self.hidden_states = torch.zeros(n, cfg.hidden_size, dtype=torch.float32, device=dev)
        self.slot_mapping = torch.full((n,), PADDING_SLOT, dtype=torch.int64, device=dev)
        # Per-request buffers have one more row: the request that owns graph padding.
        self.query_start_loc = torch.zeros(b + 2, dtype=torch.int32, device=dev)
        self.seq_lens = torch.zeros(b + 1, dtype=torch.int32, device=dev)
        self.block_table = torch.full((b + 1, self.max_blocks), -1, dtype=torch.int32, device=dev)
        self.sample_indices = torch.zeros(b, dtype=torch.int64, device=dev)
        self.base_positions = torch.zeros(b, dtype=torch.int64, device=dev)
        self.accepted_seq_lens = torch.zeros(b, dtype=torch.int32, device=dev)
        self.step_no = torch.zeros(1, dtype=torch.int64, device=dev)
        self.step_qsl = torch.arange(b + 2, dtype=torch.int32, device=dev)
        self.draft = torch.zeros(b, dtype=torch.int64, device=dev)
        self.draft_hidden = torch.zeros(b, cfg.hidden_size, dtype=torch.float32, device=dev)
        self.drafts = torch.zeros(b, cfg.num_spec_tokens, dtype=torch.int64, device=dev)
        if cfg.uses_mrope:  # the rows the rotation reads; ``positions`` still drives slots and seq_lens
            self.mrope_positions = torch.zeros(3, n, dtype=torch.int64, device=dev)
            self.base_mrope = torch.zeros(3, b, dtype=torch.int64, device=dev)
        self.pool = self.device.graph_pool() if self.mode is not GraphMode.EAGER else None

    STATIC_INPUTS = (
        "input_ids",
        "positions",
        "hidden_states",
        "slot_mapping",
        "query_start_loc",
        "seq_lens",
        "block_table",
        "sample_indices",
        "base_positions",
        "accepted_seq_lens",
        "step_no",
        "draft",
        "draft_hidden",
    )

    MROPE_INPUTS = ("mrope_positions", "base_mrope")

    def static_inputs(self) -> dict[str, torch.Tensor]:
        """The buffers every graph reads; their addresses are checked at replay."""
        names = self.STATIC_INPUTS + (self.MROPE_INPUTS if self.cfg.uses_mrope else ())
        return {name: getattr(self, name) for name in names}

    def record(self, on: bool = True) -> None:
        """Keep a ``StepRecord`` of every model call of the next propose calls (tests only)."""
        self.trace = [] if on else None

    # ----------------------------------------------------------------- propose
    def propose(self, batch: VerifiedBatch, sampled: SampledTokens) -> torch.Tensor:
        """Draft tokens, int64 [B, K]."""
        width = batch.block_table_cpu.shape[1]
        if width > self.max_blocks:
            raise ValueError(f"block_table.shape[1]={width}: the proposer holds {self.max_blocks} blocks per request")
        prepared = self.ops.prepare_call(self.cfg, batch, sampled)
        self._ensure_captured()  # before this call's state: the capture's dummy runs set their own
        # no mutate: None slices the full width; columns past a seq_len are never read
        self._batch_width = width  # pragma: no mutate
        b, n = batch.num_reqs, prepared.first.num_tokens
        self._num_reqs = b
        if self.trace is not None:
            self.trace.clear()
        rows = self._size(FIRST, n)
        self._load_first_pass(batch, prepared, rows)
        bound = self._first_bound(batch)
        self._run(FIRST, rows, bound)
        self._record(1, n, rows, b, bound)
        self.drafts[:b, 0] = self.draft[:b]
        reqs = self._size(STEP, b)
        for step in range(2, self.cfg.num_spec_tokens + 1):
            self._set_step(step)
            bound = self._step_bound(batch, step)
            self._run(STEP, reqs, bound)
            self._record(step, b, reqs, b, bound)
            self.drafts[:b, step - 1] = self.draft[:b]
        return self.drafts[:b].clone()

    def _set_step(self, step: int) -> None:
        """The step number lives on the device, so a graph reads it at replay."""
        self.step_no.fill_(step)

    def captured_sizes(self) -> dict[Phase, list[int]]:
        """Per phase, the sizes graphs were captured at, ascending (``ProposerUnderTest``)."""
        return {phase: sorted(s for p, s in self.graphs if p == phase) for phase in Phase}

    @property
    def hidden_dtype(self) -> torch.dtype:
        return self.hidden_states.dtype

    def drafts_to_host(self, drafts: torch.Tensor) -> list[list[int]]:
        """The drafts as host lists, through a pinned buffer and a non-blocking copy."""
        host = self.device.pinned(tuple(drafts.shape), drafts.dtype)
        self.device.to_host(drafts, host, non_blocking=True).synchronize()
        return host.tolist()

    def _size(self, phase: str, n: int) -> int:
        """Rows to run ``n`` rows at: the padded graph size, or ``n`` itself (eager)."""
        if not self._graphed(phase):
            return n
        return self.sizes[phase].pad(n) or n  # past the largest size: eager

    # Host-side bounds of seq_lens: from host copies only, never a device read (a draft model's
    # first pass attends one position further: its next token's row).
    def _first_bound(self, batch: VerifiedBatch) -> int:
        return int(batch.seq_lens_cpu.max()) + self.cfg.extra_rows_per_request

    def _step_bound(self, batch: VerifiedBatch, step: int) -> int:
        return min(self._first_bound(batch) + step - 1, self.cfg.max_model_len)

    def _load_first_pass(self, batch: VerifiedBatch, prepared, rows: int) -> None:
        first, b, n = prepared.first, batch.num_reqs, prepared.first.num_tokens
        self.input_ids[:n] = prepared.input_ids
        self.positions[:n] = prepared.positions
        if self.cfg.method == "draft_model":  # a draft model takes no hidden state
            self.hidden_states[:n] = 0
        else:
            self.hidden_states[:n] = self.target_hidden(batch.hidden_states[first.token_indices])
        self.input_ids[n:rows] = 0
        self.positions[n:rows] = 0
        self.hidden_states[n:rows] = 0
        self.slot_mapping.copy_(first.slot_mapping)
        self.query_start_loc[: b + 1] = first.query_start_loc
        self.query_start_loc[b + 1 :] = rows  # padding rows n..rows-1 belong to request b
        self.seq_lens[:b] = first.seq_lens
        self.seq_lens[b:] = 0
        self.block_table.fill_(-1)
        self.block_table[:b, : batch.block_table.shape[1]] = batch.block_table
        self.sample_indices[:b] = first.sample_indices
        self.sample_indices[b:] = 0
        self.base_positions[:b] = prepared.base_positions
        self.base_positions[b:] = self.cfg.max_model_len  # padded requests overflow: inert
        self.accepted_seq_lens[:b] = first.accepted_seq_lens
        self.accepted_seq_lens[b:] = 1
        if self.cfg.uses_mrope:
            rows_mrope = batch.mrope_positions[:, first.token_indices]
            self.mrope_positions[:, :n] = rows_mrope
            self.mrope_positions[:, n:rows] = 0
            self.base_mrope[:, :b] = rows_mrope[:, first.sample_indices]
            self.base_mrope[:, b:] = 0

    def target_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden states as the first pass takes them: eagle3 combines
        its auxiliary layers into one (only here: later steps feed the draft's own output)."""
        if self.cfg.method == "eagle3":
            hidden = self.model.combine_hidden_states(hidden.to(self.hidden_states.dtype))
        # no mutate: the float32 hidden_states buffer it is written into converts it
        return hidden.to(self.hidden_states.dtype)  # pragma: no mutate

    def model_positions(self, rows: int) -> torch.Tensor:
        """What the rotation of the first ``rows`` rows reads: [rows], or M-RoPE's [3, rows]."""
        return self.mrope_positions[:, :rows] if self.cfg.uses_mrope else self.positions[:rows]

    # ------------------------------------------------------------------ phases
    def _attn(self, qsl, seq_lens, block_table, slots, bound: int) -> AttentionMeta:
        return AttentionMeta(qsl, seq_lens, block_table, slots, self.device.host_param("seq_len_bound", [bound]))

    def _table(self, phase: str, reqs: int | None = None) -> torch.Tensor:
        """The block table as attention reads it: the batch's width when eager
        (less to scan), the full static width inside a graph."""
        # no mutate: the full width or the batch's: columns past a seq_len are never read
        width = self.max_blocks if self._graphed(phase) else self._batch_width  # pragma: no mutate
        return self.block_table[:reqs, :width]

    def _first_forward(self, rows: int, bound: int) -> torch.Tensor:
        attn = self._attn(self.query_start_loc, self.seq_lens, self._table(FIRST), self.slot_mapping[:rows], bound)
        return self.model_forward(self.input_ids[:rows], self.model_positions(rows), self.hidden_states[:rows], attn)

    def _first_sample(self, out: torch.Tensor, reqs: int) -> None:
        """Draft 1 of the first ``reqs`` requests: logits for their sample rows only."""
        hidden = out[self.sample_indices[:reqs]]
        self.draft_hidden[:reqs] = hidden
        self.draft[:reqs] = self.draft_logits(out, self.sample_indices[:reqs]).argmax(dim=-1)

    def draft_logits(self, out: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the model outputs ``out[rows]`` (every row of ``out`` when None): [M, V]."""
        return self.model.compute_logits(out if rows is None else out[rows])

    def _step_inputs(self, reqs: int) -> None:
        """Feed the previous draft and its hidden state to the next step (outside any graph)."""
        self.input_ids[:reqs] = self.draft[:reqs]
        self.hidden_states[:reqs] = self.draft_hidden[:reqs]

    def _step_metadata(self, reqs: int) -> None:
        meta = self.ops.advance_step(
            self.cfg, self.base_positions[:reqs], self.accepted_seq_lens[:reqs], self._table(STEP, reqs), self.step_no
        )
        self.positions[:reqs] = meta.positions
        self.slot_mapping[:reqs] = meta.slot_mapping
        self.seq_lens[:reqs] = meta.seq_lens
        if self.cfg.uses_mrope:
            self.mrope_positions[:, :reqs] = self.step_mrope(reqs)

    def step_mrope(self, reqs: int) -> torch.Tensor:
        """M-RoPE rows of the current draft step: all three advanced, 0 on overflow (``mtp.mrope``)."""
        return advance_mrope(
            self.base_mrope[:, :reqs], self.base_positions[:reqs], self.step_no, self.cfg.max_model_len
        )

    def _step_forward(self, reqs: int, bound: int) -> torch.Tensor:
        attn = self._attn(
            self.step_qsl[: reqs + 1], self.seq_lens[:reqs], self._table(STEP, reqs), self.slot_mapping[:reqs], bound
        )
        return self.model_forward(self.input_ids[:reqs], self.model_positions(reqs), self.hidden_states[:reqs], attn)

    def model_forward(self, input_ids, positions, hidden_states, attn: AttentionMeta) -> torch.Tensor:
        """One forward of the draft model (every phase's, graphed or not)."""
        return self.model.forward(input_ids, positions, hidden_states, attn)

    def _step_sample(self, out: torch.Tensor, reqs: int) -> None:
        self.draft_hidden[:reqs] = out
        self.draft[:reqs] = self.draft_logits(out).argmax(dim=-1)

    eager_phases: frozenset[str] = frozenset()  # phases a subclass cannot capture

    def _graphed(self, phase: str) -> bool:
        return self.mode is not GraphMode.EAGER and phase not in self.eager_phases

    def _metadata(self, phase: str, size: int) -> None:
        if phase == STEP:
            self._step_metadata(size)

    def _forward(self, phase: str, size: int, bound: int) -> torch.Tensor:
        return self._first_forward(size, bound) if phase == FIRST else self._step_forward(size, bound)

    def _sample(self, phase: str, size: int, out: torch.Tensor) -> None:
        if phase == STEP:
            self._step_sample(out, size)
        else:  # a captured graph samples every row of its static buffer; outside one, the batch's rows
            self._first_sample(out, self.cfg.max_num_reqs if self.in_capture else self._num_reqs)

    def _run(self, phase: str, size: int, bound: int) -> None:
        """One phase: eagerly, or by replaying its graph (captured by ``capture_all``).

        Every phase is idempotent (it reads only buffers it does not write), so
        a capture that executes the work, as the simulator's does, is harmless.
        """
        self.logits_calls += 1
        if phase == STEP:
            self._step_inputs(size)
        if not self._graphed(phase) or size > max(self.sizes[phase]):
            self._metadata(phase, size)
            self._sample(phase, size, self._forward(phase, size, bound))
            return
        if (phase, size) not in self.graphs:
            if not self._may_capture:
                captured = sorted(s for p, s in self.graphs if p == phase)
                raise GraphNotCaptured(f"no {phase} graph captured at size {size} (captured: {captured})")
            self._capture(phase, size, bound)
        graph, out = self.graphs[(phase, size)]
        piecewise = self.mode is GraphMode.PIECEWISE
        if piecewise:
            self._metadata(phase, size)
        if self.device.supports_param_update:
            graph.update_params(seq_len_bound=[bound])
        graph.replay(size, self.static_inputs())
        if piecewise:
            self._sample(phase, size, out)

    def _capture(self, phase: str, size: int, bound: int):
        piecewise = self.mode is GraphMode.PIECEWISE

        def work() -> torch.Tensor:
            if not piecewise:
                self._metadata(phase, size)
            out = self._forward(phase, size, bound)
            if not piecewise:
                self._sample(phase, size, out)
            return out

        if piecewise:
            self._metadata(phase, size)
        work()  # warm-up, as accelerators require before a capture
        self.in_capture = True
        try:
            with self.device.capture(size, self.pool, self.static_inputs()) as graph:
                out = work()
        finally:
            self.in_capture = False
        self.graphs[(phase, size)] = graph, out
        return graph, out

    def capture_all(self) -> None:
        """Capture every phase at every size on inert inputs (a dummy run per size).

        Each dummy run issues the first pass and K-1 steps, so it computes
        logits (and, under PCP, runs collectives) as many times as a real call.
        """
        if self.mode is GraphMode.EAGER:
            return
        self._may_capture = True
        try:
            for size in sorted(set(self.sizes[FIRST]) | set(self.sizes[STEP])):
                self.dummy_run(size)
        finally:
            self._may_capture = False
        self._captured = True

    def _ensure_captured(self) -> None:
        """Graph modes capture every graph before the first call or dummy run, once (a proposer whose
        phases all run eagerly, a PCP one with K=1, captures nothing)."""
        if self.mode is not GraphMode.EAGER and not self._captured and not self._may_capture:
            self.capture_all()

    def dummy_run(self, size: int) -> None:
        """Run a propose call's phases at ``size`` on inert inputs (a warm-up before any call included)."""
        self._ensure_captured()
        self._load_inert(size)
        # no mutate: None slices every row, max_num_reqs, the value given
        self._num_reqs = self.cfg.max_num_reqs  # pragma: no mutate
        if size in self.sizes[FIRST] and self._graphed(FIRST):
            self._run(FIRST, size, 1)
        for step in range(2, self.cfg.num_spec_tokens + 1):
            self._set_step(step)
            if size in self.sizes[STEP]:
                self._run(STEP, size, 1)

    def _load_inert(self, size: int) -> None:
        """Inputs that write no KV, see no KV, and sample row 0."""
        self.slot_mapping.fill_(PADDING_SLOT)
        self.block_table.fill_(-1)
        # no mutate: None slices the full width, max_blocks, the value given
        self._batch_width = self.max_blocks  # before any call (a warm-up) there is no batch's width # pragma: no mutate
        self.seq_lens.zero_()
        self.query_start_loc.zero_()
        self.query_start_loc[1:] = size
        self.sample_indices.zero_()
        self.base_positions.fill_(self.cfg.max_model_len)
        self.accepted_seq_lens.fill_(1)
        if self.cfg.uses_mrope:
            self.mrope_positions.zero_()
            self.base_mrope.zero_()

    def _record(self, step: int, n: int, rows: int, b: int, bound: int) -> None:
        if self.trace is None:
            return
        self.trace.append(
            StepRecord.capture(
                step,
                bound,
                input_ids=self.input_ids[:n],
                positions=self.positions[:n],
                seq_lens=self.seq_lens[:b],
                slot_mapping=self.slot_mapping[:n],
                query_start_loc=self.query_start_loc[: b + 1] if step == 1 else self.step_qsl[: b + 1],
                sample_indices=self.sample_indices[:b] if step == 1 else self.step_qsl[:b],
                padding_slots=self.slot_mapping[n:rows],
                rows=rows,
                **({"mrope_positions": self.mrope_positions[:, :n]} if self.cfg.uses_mrope else {}),
            )
        )
