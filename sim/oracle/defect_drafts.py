"""Drafts as an implementation with a known KV defect computes them, replayed slot by slot.

``reference_drafts`` defines docs/DESIGN.md's drafts: step j attends to the accepted prefix and the
call's earlier drafts, nothing else. Two known defects (``sim.oracle.rules``) make steps 2..K read
other keys, and the drafts are still defined, by what the cache holds:

- ``padded-seq-lens-not-lowered`` (``Rules.padded_seq_lens_lowered`` False, padded mode): step j
  attends with seq_len + j - 1, n_rej keys more than the core: the rejected tokens' KV that the first
  pass wrote and, past seq_len, whatever the slots held before the call;
- ``slot-plus-one`` (``Rules.slots_from_block_table`` False): a step writes its KV at the previous
  slot + 1, outside the block table once a draft crosses a block, so its later steps read their table
  slots (what those held) and whoever owns the slot it wrote reads its KV;
- vllm-ascend's MRV2 host lengths (``Rules.step_seq_lens``: ``advance-twice``, ``batch-bound``): step j
  attends with more keys than its context, past what the call wrote: whatever those slots held;
- vllm-ascend's ``draft-state-advanced-per-group`` (``Rules.state_advances_per_group``): step j attends
  with the seq_len of a later step and writes its KV at that step's slot, while its RoPE position is j's;
- vllm-ascend's ``mla-draft-cos-sin-shared`` (``Rules.rope_from_last_build``, an MLA draft): a call's rows
  are rotated at other positions (``reference.rope_positions``), their queries and the KV they write.

A call is replayed in the order the model runs it: the first pass writes every kept row, draft 1 is
read at each sample row, then per step every request writes its slot (where the rules put it) and
attends to positions ``0 .. seq_len - 1`` of its block table (the rules' seq_len; RoPE at the rules'
position, ALiBi recency from the context position seq_len - 1). A slot holds, first match wins:

1. what this call wrote there: a step's KV (the model's own drafts), a first-pass row's KV (the input
   id ``reference.first_pass`` gives that row and the target's hidden state at it);
2. the accepted prefix of the request whose table holds it, computed densely from scratch as in
   ``reference_drafts``, unless an earlier call's misplaced write clobbered it (``clobbered``);
3. what the paged cache held before the call (``CallInputs.snapshot``).

A key is undefined where nothing defines it: the stale last row (``Rules.stale_last_row``) and the
stale rejected rows (``Rules.stale_rejected_rows``), a NaN in
the snapshot (the poisoned cache: never written), a step's write after its request's near tie (the
implementation may have drafted the other token). A draft that reads an undefined key is undefined,
and so is every later draft of its request: ``DefectDrafts.undefined`` counts them for the caller,
who reports them. Nothing here reads a proposer's trace or outputs.
"""

from __future__ import annotations

import bisect
from typing import NamedTuple

import torch

from sim.models.tiny import TinyMtp
from sim.oracle import reference
from sim.oracle.cases import BatchCase
from sim.oracle.reference_drafts import RefDraft, dense_attention
from sim.oracle.rules import Rules

UNDEFINED = None  # a slot whose content no rule defines


class CallInputs(NamedTuple):
    """What the defect model reads of one propose call: the scenario's side only.

    histories: per request, tokens at positions 0..L (``Iteration.histories``).
    prefix_hidden: per request, the target's hidden states at 0..L-1 (eagle3: its auxiliary layers).
    batch_hidden: the target's hidden states of the batch's rows, as the runner hands them.
    snapshot: the paged cache's K and V before the call, [slots + 1, heads, head_dim] each.
    clobbered: slots an earlier call's misplaced write left holding something other than its owner's
        prefix (``misplaced_writes``), not rewritten by a first pass since.
    """

    case: BatchCase
    padded: bool
    histories: list[list[int]]
    prefix_hidden: list[torch.Tensor]
    batch_hidden: torch.Tensor
    snapshot: tuple[torch.Tensor, torch.Tensor]
    clobbered: frozenset[int] = frozenset()
    mrope: list[list[list[int]]] | None = None


class DefectDrafts(NamedTuple):
    """One request's drafts under the defect: the defined ones from draft 1 on, then how many of the
    rest (at valid positions) are undefined, and how many follow a near tie instead (not resolved)."""

    drafts: list[RefDraft]
    undefined: int = 0
    after_tie: int = 0


def is_modelled(rules: Rules, padded: bool) -> bool:
    """Whether ``rules`` make a call read KV that ``reference_drafts`` does not define: steps 2..K's,
    or a later call's prefix, which a restarted overflowing step writes into (``misplaced_writes``)."""
    return (
        not rules.slots_from_block_table
        or (padded and not rules.padded_seq_lens_lowered)
        or rules.step_seq_lens != "advance"
        or rules.state_step(2) != 2
        or rules.overflow_position == "restart"
        or rules.rotates_at_last_build
        or rules.rotates_steps_at_first_pass
        or rules.steps_read_first_pass_lengths
    )


def _top2(logits: torch.Tensor) -> RefDraft:
    vals, ids = logits.topk(2)
    return RefDraft(int(ids[0]), int(ids[1]), float(vals[0] - vals[1]))


class _Request:
    """One request's replay state: its dense prefix, the next step's inputs, what it drafted.

    ``accepted``: the prefix's rows, the last of them the sample row: an MTP layer's L rows (row p takes
    the token at p + 1 and the target's hidden state at p), a draft model's L + 1 (row p the token at p,
    the next token's row last). Either way step j's query sits at position ``accepted - 2 + j``."""

    def __init__(self, model: TinyMtp, call: CallInputs, r: int):
        self.req = call.case.requests[r]
        history = call.histories[r]
        hidden = call.prefix_hidden[r]
        if model.cfg.draft_model:
            tokens, hidden = history, torch.zeros(len(history), model.hidden_size)
        else:
            tokens = history[1:]
        self.accepted = len(tokens)
        if model.cfg.eagle3:
            hidden = model.combine_hidden_states(hidden)
        self.x = model.block_input(torch.tensor(tokens), hidden)
        rows = torch.tensor(call.mrope[r])[:, : self.accepted] if call.mrope else torch.arange(self.accepted)
        self.q, self.keys, self.vals = model.qkv(self.x, rows)
        self.token = history[-1]  # the next step's input token
        self.h: torch.Tensor | None = None  # the next step's input hidden state; None: undefined
        self.tied = False  # a near tie drafted: the implementation's later steps may run on the other token
        self.drafts: list[RefDraft] = []
        self.undefined = self.after_tie = 0

    def valid(self, j: int, max_model_len: int) -> bool:
        """Whether draft ``j`` sits at a position below ``max_model_len`` (else garbage by definition)."""
        return self.accepted - 2 + j < max_model_len

    def record(self, j: int, h: torch.Tensor | None, draft: RefDraft | None, mml: int, tolerance: float) -> None:
        """Draft ``j`` computed (None: it read an undefined key), counted where it belongs."""
        if self.valid(j, mml):
            if self.tied:
                self.after_tie += 1
            elif draft is None or self.undefined:
                self.undefined += 1
            else:
                self.drafts.append(draft)
        self.h = h
        if draft is not None:
            self.token = draft.top1
            self.tied = self.tied or draft.margin <= tolerance


class _Cache:
    """The batch's KV, slot by slot, as the defect model sees it during one call."""

    def __init__(self, call: CallInputs, requests: list[_Request]):
        self.call, self.requests = call, requests
        self.block_size = call.case.config.block_size
        self.written: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}
        k, v = call.snapshot
        self.never = torch.isnan(k).flatten(1).any(dim=1) | torch.isnan(v).flatten(1).any(dim=1)  # poisoned: unwritten
        self.clobbered = torch.tensor(sorted(call.clobbered), dtype=torch.long)

    def attend(self, model: TinyMtp, r: int, q: torch.Tensor, seq_len: int) -> torch.Tensor | None:
        """[1, heads, d] query of request ``r`` over positions 0..seq_len-1 of its block table (none past
        max_model_len: no position there holds KV, the attention's host bound stops there); None if any
        of those keys is undefined, a position past the request's blocks included (a runner's table row
        is padded there, with the null block or no block: what a kernel reads there is no request's).
        Each position's key and value as the module's docstring orders them: this call's write, else the
        request's own prefix (unless clobbered), else the snapshot's."""
        req = self.requests[r]
        blocks = req.req.blocks
        visible = min(seq_len, self.call.case.config.max_model_len)
        if visible > len(blocks) * self.block_size:
            return None
        positions = torch.arange(visible)
        slots = torch.tensor(blocks, dtype=torch.long)[positions // self.block_size] * self.block_size
        slots += positions % self.block_size
        keys, vals = self.call.snapshot[0][slots], self.call.snapshot[1][slots]
        undefined = self.never[slots]
        own = (positions < req.req.num_computed) & ~torch.isin(slots, self.clobbered)
        keys[own], vals[own] = req.keys[positions[own]], req.vals[positions[own]]
        undefined &= ~own
        if self.written:
            hit = torch.isin(slots, torch.tensor(list(self.written), dtype=torch.long)).nonzero().flatten()
            for p in hit.tolist():
                kv = self.written[int(slots[p])]
                if kv is UNDEFINED:
                    return None
                keys[p], vals[p] = kv
                undefined[p] = False
        if undefined.any():
            return None
        return dense_attention(q, keys, vals, torch.tensor([seq_len - 1]), model.scale, model.recency)


def _first_pass_writes(
    model: TinyMtp, call: CallInputs, rules: Rules, cache: _Cache, first: reference.RefFirstPass, rope: list[int]
) -> None:
    """Every kept first-pass row's KV at its slot: the prefix's from scratch, a rejected row's from its
    first-pass input id and the target's hidden state at that row (a draft model's rejected rows write
    none)."""
    case = call.case
    ids = first.input_ids
    stale = len(ids) - 1 if rules.stale_last_row and len(ids) - 1 not in first.sample_indices else None
    unwritten = rules.unwritten_first_pass_rows(first.query_start_loc, first.sample_indices)
    row = 0
    for r, req in enumerate(case.requests):
        state = cache.requests[r]
        start = first.query_start_loc[r]
        for i in range(first.query_start_loc[r + 1] - start):
            p, slot = first.positions[start + i], first.slot_mapping[start + i]
            if slot < 0:
                continue
            if p < state.accepted and rope[start + i] == p:
                cache.written[slot] = (state.keys[p], state.vals[p])
            elif p < state.accepted:  # the prefix's row, rotated at another position
                _, k, v = model.qkv(state.x[p : p + 1], torch.tensor([rope[start + i]]))
                cache.written[slot] = (k[0], v[0])
            elif start + i == stale or start + i in unwritten:
                cache.written[slot] = UNDEFINED  # an old buffer id (and position): its KV is no rule's
            else:
                hidden = call.batch_hidden[row + i : row + i + 1]
                if model.cfg.eagle3:
                    hidden = model.combine_hidden_states(hidden)
                x = model.block_input(torch.tensor([ids[start + i]]), hidden)
                rows = (
                    torch.tensor([[m[i]] for m in req.mrope])
                    if case.config.uses_mrope
                    else torch.tensor([rope[start + i]])
                )
                _, k, v = model.qkv(x, rows)
                cache.written[slot] = (k[0], v[0])
        row += req.query_len


def _step_rows(case: BatchCase, j: int, rope: list[int], r: int) -> torch.Tensor:
    """Request ``r``'s position at step ``j`` as ``qkv`` takes it: where the rules rotate it
    (``rope``), under M-RoPE its three rows."""
    if case.config.uses_mrope:
        return torch.tensor([[row[r]] for row in reference.mrope_step(case, j)])
    return torch.tensor([rope[r]])


@torch.no_grad()
def defect_drafts(model: TinyMtp, call: CallInputs, rules: Rules, tolerance: float) -> list[DefectDrafts]:
    """Per request, the drafts an implementation under ``rules`` computes (see the module's docstring).

    ``tolerance``: the margin under which a draft is a near tie, after which the request's own drafts
    are not resolved and the KV its later steps write is undefined to everyone.
    """
    case = call.case
    mml, k = case.config.max_model_len, case.config.num_spec_tokens
    requests = [_Request(model, call, r) for r in range(len(case.requests))]
    cache = _Cache(call, requests)
    first = reference.first_pass(case, call.padded, rules)
    rope = reference.rope_positions(case, 1, call.padded, rules)
    _first_pass_writes(model, call, rules, cache, first, rope)
    for r, state in enumerate(requests):
        q = state.q[-1:]
        at = rope[first.sample_indices[r]]
        if not case.config.uses_mrope and at != state.accepted - 1:  # the sample row rotated elsewhere
            q = model.qkv(state.x[-1:], torch.tensor([at]))[0]
        out = cache.attend(model, r, q, state.accepted)
        _draft(model, state, 1, state.x[-1:], out, mml, tolerance)
    if rules.first_draft_repeated(case):  # no step runs: draft 1, K times (Rules.prefill_batches_draft_once)
        return [_repeated(state, k, mml) for state in requests]
    for j in range(2, k + 1):
        meta = reference.step(case, j, call.padded, rules)
        rope = reference.rope_positions(case, j, call.padded, rules)
        queries = []
        for r, state in enumerate(requests):  # every row writes its KV, then every row attends
            slot = meta.slot_mapping[r]
            if state.h is None:
                queries.append(None)
                if slot >= 0:
                    cache.written[slot] = UNDEFINED
                continue
            x = model.block_input(torch.tensor([state.token]), state.h)
            q, k1, v1 = model.qkv(x, _step_rows(case, j, rope, r))
            queries.append((x, q))
            if slot >= 0:
                cache.written[slot] = UNDEFINED if state.tied else (k1[0], v1[0])
        for r, state in enumerate(requests):
            x, q = queries[r] if queries[r] is not None else (None, None)
            req, seen = _row_context(meta, r)
            out = None if q is None else cache.attend(model, req, q, seen)
            _draft(model, state, j, x, out, mml, tolerance)
    return [DefectDrafts(s.drafts, s.undefined, s.after_tie) for s in requests]


def _row_context(meta: reference.RefStep, row: int) -> tuple[int, int]:
    """(the request whose keys step row ``row`` attends to, how many of them), as a kernel reads the
    step's query offsets and key lengths: row n of request r is its query ``n - qsl[r]`` of ``q_r``,
    at context position ``seq_len[r] - q_r + n - qsl[r]`` (one row per request: its own, seq_len)."""
    qsl = meta.query_start_loc
    r = bisect.bisect_right(qsl, row) - 1
    return r, meta.seq_lens[r] - (qsl[r + 1] - qsl[r]) + (row - qsl[r]) + 1


def _draft(model: TinyMtp, state: _Request, j: int, x, attn_out, mml: int, tolerance: float) -> None:
    """Draft ``j`` from the attention output of its row (None: it read an undefined key)."""
    if attn_out is None:
        state.record(j, None, None, mml, tolerance)
        return
    h = model.block_output(x, attn_out)
    state.record(j, h, _top2(model.compute_logits(h)[0]), mml, tolerance)


def _repeated(state: _Request, k: int, mml: int) -> DefectDrafts:
    """Draft 1 repeated at every valid position, or all of them undefined."""
    n = sum(state.valid(j, mml) for j in range(1, k + 1))
    return DefectDrafts(state.drafts[:1] * n) if state.drafts else DefectDrafts([], n)
