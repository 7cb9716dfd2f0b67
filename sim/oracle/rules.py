"""What the reference expects, per implementation: docs/DESIGN.md's rules, or an adapter's documented divergences.

An implementation under test may differ from docs/DESIGN.md by design (vLLM's
overflow handling) or by a known defect (vllm-ascend 0.23 never lowering
padded seq_lens). Each difference is named once in the adapter's divergence
table and pinned by a test there; here it is modelled, so the gate's
properties still run on that implementation and catch everything else.
``CORE`` is docs/DESIGN.md itself, what the project's own core must meet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

# What a draft step whose position reaches max_model_len gets, on two independent axes.
OVERFLOW_POSITIONS = ("zero", "restart", "clamp")
OVERFLOW_SEQ_LENS = ("one", "with-position", "own-restart", "clamp")
# What later draft steps' attention is told as seq_len, beyond the overflow axis.
STEP_SEQ_LENS = ("advance", "advance-twice", "batch-bound")
# the draft layer's attention family: GQA reads its rows' positions, MLA and SFA (MLA with a sparse indexer) its metadata's
DRAFT_ATTNS = ("gqa", "mla", "sfa")


@dataclass(frozen=True)
class Rules:
    """How the reference computes what an implementation must produce.

    padded_seq_lens_lowered: padded mode lowers every later step's seq_len by
        the rejected count (False: vllm-ascend's ``padded-seq-lens-not-lowered``,
        the 0.13-era proposer's defect: steps 2..K count the rejected tokens as context).
    overflow_position: the position (and whether KV is written) of a draft step whose position
        reaches ``max_model_len``:
        ``zero``: position 0 and no KV write, every such step (docs/DESIGN.md step 4);
        ``restart``: the first such step as ``zero``, later ones continue from position 0
        (1, 2, ...) and write KV at those positions' slots (vLLM's ``overflow-restart``,
        vllm-ascend 0.13's ``overflow-position-restart``);
        ``clamp``: the position held at ``max_model_len - 1``, KV written at its slot, every
        such step (vLLM MRV2's ``overflow-clamp``).
    overflow_seq_len: the seq_len of those steps:
        ``one``: 1 on every step whose position reaches ``max_model_len`` (the design);
        ``with-position``: counted with the restarting position: 1 at the first such step,
        2, 3, ... after (vLLM's ``overflow-restart``);
        ``own-restart``: raised once per step on its own, back to 1 once past
        ``max_model_len`` (vllm-ascend's ``overflow-seq-len-restart``, 0.13's
        ``overflow-position-restart``);
        ``clamp``: held at ``max_model_len`` (MRV2's ``overflow-clamp``).
    max_query_len_compacted: unpadded mode reports the compacted batch's longest
        query (False: the original lengths, an upper bound, the 0.13-era proposer's defect).
    stale_last_row: the batch's last row keeps an old buffer value as its
        first-pass input id when it is no sample row (vLLM's ``stale-last-row``);
        that id is not compared.
    stale_rejected_rows: the first pass writes no id and no position for a request's rows after its
        sample row (its rejected drafts): they keep old buffer values and are not compared (vLLM
        MRV2's ``stale-rejected-rows``).
    steps_run_first_pass_rows: steps 2..K run at the first pass's row count,
        the rows past the batch's requests inert (slot -1), rather than one row
        per request, for method ``mtp``, and for every method once the drafter has graphs
        (vllm-ascend's ``mtp-steps-run-padded-rows``; ``steps_at_first_pass_rows``).
    slots_from_block_table: a later step's slot is looked up in the block table
        at its position (False: the previous step's slot + 1, starting from the
        last accepted token's, -1 on a step that writes no KV: the 0.13-era proposer's
        ``slot_mapping += 1``, wrong across a block boundary).
    num_computed_from_first_pass: the host count of tokens before each request's query
        (``num_computed_tokens_cpu``) at steps 2..K is the first pass's, advanced by one per
        step, rather than the tokens before the step's one-token query (``seq_len - 1``):
        vllm-ascend's ``num-computed-tokens-drift``, short by the first pass's query length
        less one.
    step_seq_lens: the seq_len draft step ``j`` >= 2 attends with:
        ``advance``: the base advanced once per step, ``base + j - 1`` (with ``overflow_seq_len``);
        ``advance-twice``: advanced twice per step after the first, ``min(base + 2j - 3, max_model_len)``
        (vllm-ascend 0.23.0's MRV2 ``host-seq-lens-advanced-twice``);
        ``batch-bound``: the batch's bound for every request and step, ``min(max seq_len + K,
        max_model_len)`` (vllm-ascend main's MRV2 ``draft-seq-lens-batch-bound``).
    step_seq_lens_in_graphs: where set, ``step_seq_lens`` in a call whose draft steps 2..K replay a
        captured graph of their own (``for_call``): vllm-ascend main's MRV2 decode graph, whose attention
        tasks are updated with each request's own lengths (``advance``), where its eager steps read the
        batch's bound.
    state_advances_per_group: the per-step state (each request's seq_len, the position its slot is
        looked up at, its host count of computed tokens) advances once per draft attention group at
        each step, not once per step: with G groups, step ``j`` gets the state of step ``1 + G(j - 1)``
        while the model's position still advances by one (vllm-ascend's
        ``draft-state-advanced-per-group``: ``attn_update_stack_num_spec_norm`` chained over the groups).
    draft_attn_groups: how many attention groups the draft's layers form (a fact of the configuration
        run, not a divergence: it decides nothing unless ``state_advances_per_group``).
    rope_from_last_build: with ``num_spec_tokens`` >= 2 and an MLA draft, every model call but the last
        rotates its decode rows at the positions of the last step built (vllm-ascend's
        ``mla-draft-cos-sin-shared``: every step's cos/sin a view of one buffer, every step built before
        the first forward): the first pass's first B rows (of those before its first prefill request)
        get the last step's positions of requests 0..B-1, and steps 2..K-1 the last step's positions.
    sfa_rope_from_last_build: likewise with an SFA draft, whose every build writes the cos/sin of all its
        rows into that buffer (v0.21.0rc's ``sfa-draft-cos-sin-shared``, before vllm-ascend #10878): the
        first pass's first B rows, whatever their requests, and steps 2..K-1.
    graph_steps_rope_of_first_pass: in a call that replays a captured draft graph (``for_call``), with an
        SFA draft (its builder's draft steps gather their cos/sin afresh), every draft step 2..K rotates row i at the
        position the first pass's row i is rotated at (vllm-ascend's ``sfa-graph-steps-replay-the-first-pass``: the
        dummy run captures the steps on the global cos/sin buffer, which only the first pass's build
        writes; each step's own cos/sin, gathered afresh, is never read by the graph).
    graph_steps_lengths_of_first_pass: likewise, every draft step 2..K reads the first pass's query offsets
        and key lengths (vllm-ascend main's SFA builder, which copies every build's lengths into its own
        buffers: the captured steps read the non-draft ones, which only the first pass's build writes).
    dp: the data-parallel ranks the call's rank steps among (a fact of the configuration run, not a
        divergence): with more than one, the first pass (and the steps that run its rows) may run more
        rows than its own, padded to a peer's (the size is checked across the ranks,
        ``sim.impls.vllm_ascend.data_parallel``).
    draft_attn: the attention family of the draft layer, ``gqa``, ``mla`` or ``sfa`` (a fact of the
        configuration run, not a divergence: it decides nothing unless ``rope_from_last_build`` or one of
        the ``graph_steps_*`` rules holds).
    dense_drafts_skip_dp_sync: a drafter whose draft has no experts (an EAGLE or EAGLE-3 head: attention
        and an MLP) syncs nothing with its data-parallel peers: each rank drafts at its own size, its forwards
        told their own token count for every rank (vllm-ascend's ``dense-draft-skips-the-dp-sync``;
        ``drafts_outside_dp``).
    method, graph_mode: the drafting method and the drafter's graph mode (facts of the configuration
        run: they decide nothing unless ``steps_run_first_pass_rows`` or ``dense_drafts_skip_dp_sync``).
    prefill_batches_draft_once: a batch with a prefill in it (see
        ``first_draft_repeated``) runs the first pass only and returns draft 1
        K times (vllm-ascend 0.13's ``with_prefill`` early exit).
    graphs_uniform_decode_only: in a graph mode, only a uniform decode batch (every request
        ``num_spec_tokens + 1`` tokens, none on its prompt's first chunk) runs padded to a captured size; any other runs eagerly at
        its own row count (vllm-ascend's ``full-graphs-uniform-decode-only``: FULL_DECODE_ONLY).
    eager_batches_padded: under ``graphs_uniform_decode_only``, a batch that runs eagerly still runs
        padded to the smallest captured size that holds it: only the replays are uniform decodes' alone
        (v0.18.0's drafter pads its rows before it dispatches).
    sample_report: for each token id, the id the implementation's greedy sampling reports when that id
        is the draft model's argmax (vllm-ascend's ``reduce-sample-ids-of-a-short-last-shard``, set from the
        TP mesh run: ``sim.impls.vllm_ascend.tensor_parallel``), or -1 for an id it never reports (v0.22.1rc's
        ``eagle-reduce-sample-drafts-each-ranks-own-argmax``: another rank's); None: the id itself. The reference drafts
        with the reported ids (``reference_drafts.ReportedIds``), each fed to the next step as the
        implementation feeds it.
    defects: the known defects among the divergences modelled, each ``(id, the fields modelling it)``:
        an alternative, never the expectation. Where one decides a value, the spec's value is accepted
        too (``alternatives``), and what a call followed is reported (sim/serving/run.py). Not part of
        the rules' identity (``==``): it says what else is accepted, not what is computed.
    """

    padded_seq_lens_lowered: bool = True
    overflow_position: str = "zero"
    overflow_seq_len: str = "one"
    max_query_len_compacted: bool = True
    stale_last_row: bool = False
    stale_rejected_rows: bool = False
    steps_run_first_pass_rows: bool = False
    slots_from_block_table: bool = True
    prefill_batches_draft_once: bool = False
    num_computed_from_first_pass: bool = False
    step_seq_lens: str = "advance"
    step_seq_lens_in_graphs: str | None = None
    state_advances_per_group: bool = False
    draft_attn_groups: int = 1
    rope_from_last_build: bool = False
    sfa_rope_from_last_build: bool = False
    graph_steps_rope_of_first_pass: bool = False
    graph_steps_lengths_of_first_pass: bool = False
    draft_attn: str = "gqa"
    dense_drafts_skip_dp_sync: bool = False
    method: str = "mtp"
    graph_mode: str = "eager"
    dp: int = 1
    graphs_uniform_decode_only: bool = False
    eager_batches_padded: bool = False
    sample_report: tuple[int, ...] | None = None
    defects: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.overflow_position not in OVERFLOW_POSITIONS:
            raise ValueError(f"overflow_position={self.overflow_position!r}: expected one of {OVERFLOW_POSITIONS}")
        if self.overflow_seq_len not in OVERFLOW_SEQ_LENS:
            raise ValueError(f"overflow_seq_len={self.overflow_seq_len!r}: expected one of {OVERFLOW_SEQ_LENS}")
        for name in ("step_seq_lens", "step_seq_lens_in_graphs"):
            value = getattr(self, name)
            if value not in STEP_SEQ_LENS and (name == "step_seq_lens" or value is not None):
                raise ValueError(f"{name}={value!r}: expected one of {STEP_SEQ_LENS}")
        if self.draft_attn not in DRAFT_ATTNS:
            raise ValueError(f"draft_attn={self.draft_attn!r}: expected one of {DRAFT_ATTNS}")
        if self.draft_attn_groups < 1:
            raise ValueError(f"draft_attn_groups={self.draft_attn_groups}: expected at least 1")

    def unmodelled(self, ident: str, fields) -> Rules:
        """These rules with the divergence ``ident`` (its rule's ``fields``) no longer modelled: the spec for it."""
        if ident in dict(self.defects):
            return self.without(ident)
        return dataclasses.replace(self, **{name: getattr(CORE, name) for name in fields})

    def without(self, defect: str) -> Rules:
        """These rules with the known defect ``defect`` no longer modelled: the spec for that one behaviour."""
        fields = dict(self.defects)[defect]
        kept = tuple(d for d in self.defects if d[0] != defect)
        return dataclasses.replace(self, defects=kept, **{name: getattr(CORE, name) for name in fields})

    def alternatives(self, deciding: list[str]) -> list[tuple[tuple[str, ...], Rules]]:
        """What a call may follow instead of these rules, where the defects ``deciding`` decide some of
        its values: the spec for each one alone, then (with two or more) for all of them at once; each
        with the ids it takes as fixed."""
        out = [((d,), self.without(d)) for d in deciding]
        if len(deciding) > 1:
            spec = self
            for d in deciding:
                spec = spec.without(d)
            out.append((tuple(deciding), spec))
        return out

    @property
    def eager_batches_unpadded(self) -> bool:
        """Whether a batch that runs eagerly in a graph mode runs at its own rows, not padded to a captured size."""
        return self.graphs_uniform_decode_only and not self.eager_batches_padded

    @property
    def steps_at_first_pass_rows(self) -> bool:
        """Whether draft steps 2..K run at the first pass's row count: ``steps_run_first_pass_rows`` for
        method ``mtp``, or for any method with a drafter that has graphs (vllm-ascend's
        ``input_batch_size``: ``num_input_tokens`` if the method is ``mtp`` or it uses graphs)."""
        return self.steps_run_first_pass_rows and (self.method == "mtp" or self.graph_mode != "eager")

    @property
    def steps_outside_the_dp_view(self) -> bool:
        """Whether draft steps 2..K run the batch's own rows under the first pass's DP view (its
        ``num_tokens_across_dp``): where ``steps_run_first_pass_rows`` is the method's and graphs' alone,
        an eager drafter of another method runs them at one row per request without a DP sync."""
        return self.steps_run_first_pass_rows and not self.steps_at_first_pass_rows

    @property
    def drafts_outside_dp(self) -> bool:
        """Whether the drafter syncs nothing with its DP peers: ``dense_drafts_skip_dp_sync`` for a
        method whose draft is dense (an EAGLE or EAGLE-3 head; MTP layers are the target's MoE layers)."""
        return self.dense_drafts_skip_dp_sync and self.method in ("eagle", "eagle3")

    @property
    def rotates_at_last_build(self) -> bool:
        """Whether calls are rotated at the last step built's positions: ``rope_from_last_build`` on an
        MLA draft, ``sfa_rope_from_last_build`` on an SFA one (drafts whose metadata carries their rotation)."""
        return (self.rope_from_last_build and self.draft_attn == "mla") or (
            self.sfa_rope_from_last_build and self.draft_attn == "sfa"
        )

    @property
    def rotates_steps_at_first_pass(self) -> bool:
        """Whether draft steps 2..K rotate at the first pass's rows' positions: ``graph_steps_rope_of_first_pass``
        on an SFA draft, in a call that replays a graph."""
        return self.graph_steps_rope_of_first_pass and self.draft_attn == "sfa"

    @property
    def steps_read_first_pass_lengths(self) -> bool:
        """Whether draft steps 2..K read the first pass's query offsets and key lengths:
        ``graph_steps_lengths_of_first_pass`` on an SFA draft, in a call that replays a graph."""
        return self.graph_steps_lengths_of_first_pass and self.draft_attn == "sfa"

    def for_call(self, replays_graph: Callable[[], bool], steps_replay_graph: Callable[[], bool] = bool) -> Rules:
        """These rules for one call: what holds only when a captured graph runs it is dropped unless
        ``replays_graph()`` (asked only where the rules hold such a thing) says one does; the step lengths
        of draft steps replayed from a graph of their own where ``steps_replay_graph()`` (asked likewise)."""
        rules = self
        if self.step_seq_lens_in_graphs is not None and steps_replay_graph():
            rules = dataclasses.replace(rules, step_seq_lens=self.step_seq_lens_in_graphs)
        if not (self.graph_steps_rope_of_first_pass or self.graph_steps_lengths_of_first_pass) or replays_graph():
            return rules
        return dataclasses.replace(rules, graph_steps_rope_of_first_pass=False, graph_steps_lengths_of_first_pass=False)

    def step_seq_base(self, seq_len: int, accepted: int, padded: bool) -> int:
        """The seq_len later steps advance from: the accepted prefix, or the whole verified length."""
        return seq_len if padded and not self.padded_seq_lens_lowered else accepted

    def first_draft_repeated(self, case) -> bool:
        """Whether the batch's drafts are draft 1 repeated: under ``prefill_batches_draft_once``, when
        vllm-ascend's runner sees a prefill (its attention state is neither DecodeOnly nor SpecDecoding:
        no request has context yet, or some query is neither one token nor one token plus its drafts)."""
        if not self.prefill_batches_draft_once:
            return False
        reqs = case.requests
        if all(r.num_computed == 0 for r in reqs):
            return True
        return not (all(r.query_len == 1 for r in reqs) or all(r.query_len - r.num_drafts == 1 for r in reqs))

    def state_step(self, j: int) -> int:
        """The step whose per-step state draft step ``j`` gets (``state_advances_per_group``), else ``j``."""
        return 1 + self.draft_attn_groups * (j - 1) if self.state_advances_per_group else j

    def step_slot(self, slot_of_position, last_pos: int, j: int, max_model_len: int) -> int:
        """The KV slot of draft step ``j`` >= 2: ``slot_of_position(position)`` or -1 where the step writes
        no KV; without ``slots_from_block_table``, the last accepted token's slot advanced once per step."""
        if self.slots_from_block_table:
            pos, _, writes = self.step(last_pos, 0, j, max_model_len)
            return slot_of_position(pos) if writes else -1
        slot = slot_of_position(last_pos)
        for i in range(2, j + 1):
            slot = slot + 1 if self.step(last_pos, 0, i, max_model_len)[2] else -1
        return slot

    def step(self, last_pos: int, base_seq: int, j: int, max_model_len: int) -> tuple[int, int, bool]:
        """(position, seq_len, writes KV) of draft step ``j`` >= 2 from the last accepted
        position and the seq_len base (both from the first pass): each overflow axis on its own."""
        restarted_pos, restarted_seq, restarted_writes = self._restarted(last_pos, base_seq, j, max_model_len)
        pos = last_pos + j - 1
        over = pos >= max_model_len
        if self.overflow_position == "restart":
            pos, writes = restarted_pos, restarted_writes
        elif self.overflow_position == "clamp":
            pos, writes = min(pos, max_model_len - 1), True
        else:
            pos, writes = (0, False) if over else (pos, True)
        seq = {
            "one": 1 if over else base_seq + j - 1,
            "with-position": restarted_seq,
            "own-restart": self._seq_len_restart(base_seq, j, max_model_len),
            "clamp": min(base_seq + j - 1, max_model_len),
        }[self.overflow_seq_len]
        return pos, seq, writes

    def step_seq_len(self, seq_len: int, base_seq: int, j: int, max_model_len: int, batch_bound: int) -> int:
        """The seq_len step ``j`` >= 2 attends with under ``step_seq_lens``: ``seq_len`` (what ``step``
        gives) unless the lengths advance twice or are the batch's bound ``batch_bound``."""
        if self.step_seq_lens == "advance-twice":
            return min(base_seq + 2 * j - 3, max_model_len)
        if self.step_seq_lens == "batch-bound":
            return batch_bound
        return seq_len

    @staticmethod
    def _restarted(last_pos: int, base_seq: int, j: int, max_model_len: int) -> tuple[int, int, bool]:
        """Position, seq_len and KV write of step ``j`` when an overflowing step goes to 0 / 1 / no
        write and the next steps count on from there (vLLM V1's per-step kernel)."""
        pos, seq, writes = last_pos, base_seq, True
        for _ in range(j - 1):
            pos, seq, writes = pos + 1, seq + 1, True
            if pos >= max_model_len:
                pos, seq, writes = 0, 1, False
        return pos, seq, writes

    def unwritten_first_pass_rows(self, query_start_loc: list[int], sample_indices: list[int]) -> set[int]:
        """First-pass rows whose input id and position are old buffer values by design (not compared):
        under ``stale_rejected_rows``, each request's rows after its sample row."""
        if not self.stale_rejected_rows:
            return set()
        return {i for r, s in enumerate(sample_indices) for i in range(s + 1, query_start_loc[r + 1])}

    @staticmethod
    def _seq_len_restart(base_seq: int, j: int, max_model_len: int) -> int:
        """seq_len raised once per step from ``base_seq``, back to 1 once past ``max_model_len``."""
        seq = base_seq
        for _ in range(j - 1):
            seq = 1 if seq + 1 > max_model_len else seq + 1
        return seq


CORE = Rules()
