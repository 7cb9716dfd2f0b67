"""Comparing a proposer's drafts and per-step metadata with the reference.

Integer metadata must match exactly. A draft token must match wherever the
reference's top-1/top-2 logit margin exceeds the device dtype's tolerance;
below it either of the two is accepted and that request's later drafts are
not compared (they continue from a different token).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from mtp.trace import Phase, StepRecord
from sim.oracle import reference
from sim.oracle.cases import BatchCase, slot_of
from sim.oracle.reference_drafts import RefDraft, reference_drafts
from sim.oracle.rules import CORE, Rules

MARGIN_TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}


class Mismatch(NamedTuple):
    iteration: int
    request: int | None  # the request's id, or None for batch-wide metadata
    what: str
    got: object
    want: object

    def __str__(self) -> str:
        who = f"request {self.request}" if self.request is not None else "batch"
        return f"iteration {self.iteration}, {who}: {self.what}: got {self.got}, want {self.want}"


def compare_drafts(
    it: int, rid: int, got: list[int], want: list[RefDraft], tolerance: float
) -> tuple[list[Mismatch], int, int]:
    """(mismatches, drafts compared, drafts skipped as ambiguous) for one request."""
    compared = 0
    for j, (tok, ref) in enumerate(zip(got, want), start=1):
        if ref.margin <= tolerance:
            if tok not in (ref.top1, ref.top2):
                return [Mismatch(it, rid, f"draft {j} (near tie)", tok, (ref.top1, ref.top2))], compared, 1
            return [], compared, len(want) - compared
        compared += 1
        if tok != ref.top1:
            return [Mismatch(it, rid, f"draft {j}", tok, f"{ref.top1} (margin {ref.margin:.3g})")], compared, 0
    return [], compared, 0


def _first_diff(name: str, it: int, got: torch.Tensor, want: list[int]) -> list[Mismatch]:
    got = got.tolist()
    if got == want:
        return []
    i = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    return [Mismatch(it, None, f"{name}[{i}:]", got[i : i + 6], want[i : i + 6])]


def expected_rows(n: int, captured: list[int]) -> int:
    """The smallest captured size holding ``n`` rows, else ``n`` (eager)."""
    return min((s for s in captured if s >= n), default=n)


def compare_trace(
    it: int,
    case: BatchCase,
    padded: bool,
    trace: list[StepRecord],
    captured: dict[str, list[int]] | None = None,
    rules: Rules = CORE,
) -> list[Mismatch]:
    """The metadata each model call received against the reference's.

    ``captured``: per ``Phase``, the sizes graphs were captured
    at; each call must run at the smallest one that holds its rows. ``rules``:
    the implementation's documented divergences.
    """
    ref = reference.first_pass(case, padded, rules)
    flat_pos = [r.num_computed + i for r in case.requests for i in range(r.query_len)]
    first = trace[0]
    out = []
    ids = ref.input_ids
    if rules.stale_last_row and len(ids) - 1 not in ref.sample_indices:
        ids = ids[:-1] + first.input_ids[len(ids) - 1 :].tolist()[:1]  # an old buffer value, by design
    stale = rules.unwritten_first_pass_rows(ref.query_start_loc, ref.sample_indices)
    positions = [flat_pos[i] for i in ref.token_indices]
    out += _first_diff("first pass input_ids", it, first.input_ids, keep_stale(ids, first.input_ids, stale))
    out += _first_diff("first pass positions", it, first.positions, keep_stale(positions, first.positions, stale))
    out += _first_diff("first pass seq_lens", it, first.seq_lens, ref.seq_lens)
    out += _first_diff("first pass slot_mapping", it, first.slot_mapping, ref.slot_mapping)
    out += _first_diff("first pass query_start_loc", it, first.query_start_loc, ref.query_start_loc)
    out += _first_diff("first pass sample_indices", it, first.sample_indices, ref.sample_indices)
    for rec in trace:
        first_rows = rec.step == 1 or rules.steps_run_first_pass_rows
        real = len(ref.token_indices) if first_rows else len(case.requests)
        want_rows = expected_rows(real, (captured or {}).get(Phase.FIRST if rec.step == 1 else Phase.STEP, []))
        if rec.rows != want_rows:
            out.append(Mismatch(it, None, f"step {rec.step} rows run", rec.rows, f"{want_rows} for {real} rows"))
        if (rec.padding_slots != -1).any():
            out.append(Mismatch(it, None, f"step {rec.step} graph-padding slots", rec.padding_slots.tolist(), "all -1"))
        if rec.seq_lens.numel() and rec.seq_len_bound < int(rec.seq_lens.max()):
            out.append(
                Mismatch(it, None, f"step {rec.step} seq_len_bound", rec.seq_len_bound, f">= {int(rec.seq_lens.max())}")
            )
    if case.config.uses_mrope:
        out += _mrope_diff(it, case, padded, trace)
    for rec in trace[1:]:
        want = reference.step(case, rec.step, padded, rules)
        out += _first_diff(f"step {rec.step} positions", it, rec.positions, want.positions)
        out += _first_diff(f"step {rec.step} seq_lens", it, rec.seq_lens, want.seq_lens)
        out += _first_diff(f"step {rec.step} slot_mapping", it, rec.slot_mapping, want.slot_mapping)
    return out


def keep_stale(want: list[int], got, rows: set[int]) -> list[int]:
    """``want`` with ``got``'s values at ``rows``: rows an implementation leaves unwritten by design."""
    got = got.tolist() if hasattr(got, "tolist") else list(got)
    return [got[i] if i in rows and i < len(got) else w for i, w in enumerate(want)]


def drafts_over_intact_kv(case: BatchCase, r: int, padded: bool, rules: Rules) -> int:
    """How many of request ``r``'s drafts read only KV written where the block table says: all when
    slots come from the block table; else those before the first step that writes ``r``'s KV
    elsewhere (that step's own and every later key is read from where it was never written) or
    reads a slot that some request's step has written by mistake (a plus-one slot run past its
    block into a block that ``r`` owns: in the same call, ``r`` reads the other request's K/V)."""
    k = case.config.num_spec_tokens
    if rules.slots_from_block_table:
        return k
    table = dataclasses.replace(rules, slots_from_block_table=True)
    blocks, size = case.requests[r].blocks, case.config.block_size
    misplaced: set[int] = set()
    for j in range(2, k + 1):
        got, want = reference.step(case, j, padded, rules), reference.step(case, j, padded, table)
        if got.slot_mapping[r] != want.slot_mapping[r]:
            return j - 1
        misplaced |= {s for s, w in zip(got.slot_mapping, want.slot_mapping) if s != w and s >= 0}
        read = {slot_of(blocks, p, size) for p in range(got.seq_lens[r]) if p // size < len(blocks)}
        if read & misplaced:
            return j - 1
    return k


def _mrope_diff(it: int, case: BatchCase, padded: bool, trace: list[StepRecord]) -> list[Mismatch]:
    """Every model call's M-RoPE rows against the reference, row by row."""
    out = []
    for rec in trace:
        if rec.mrope_positions is None:
            return [Mismatch(it, None, f"step {rec.step} mrope_positions", None, "3 rows (the config uses M-RoPE)")]
        want = reference.mrope_first_pass(case, padded) if rec.step == 1 else reference.mrope_step(case, rec.step)
        for i, name in enumerate(("temporal", "height", "width")):
            out += _first_diff(f"step {rec.step} mrope {name} row", it, rec.mrope_positions[i], want[i])
    return out


def kv_written_elsewhere(case: BatchCase, padded: bool, rules: Rules) -> bool:
    """Whether a draft step of this call writes KV where the block table does not put its position
    (``Rules.slots_from_block_table`` False): that slot belongs to another position or request, so
    no reference defines the drafts of later calls."""
    if rules.slots_from_block_table or rules.first_draft_repeated(case):
        return False
    table = dataclasses.replace(rules, slots_from_block_table=True)
    return any(
        reference.step(case, j, padded, rules).slot_mapping != reference.step(case, j, padded, table).slot_mapping
        for j in range(2, case.config.num_spec_tokens + 1)
    )


def compare_iteration_drafts(
    iteration, drafts: list[list[int]], ref_model, target, scenario, tolerance: float, rules: Rules = CORE
):
    """(mismatches, drafts compared, drafts skipped) of one serving iteration's
    drafts against from-scratch drafts, for every request whose drafts are used
    (the first ``rules.drafts_defined`` of each)."""
    defined = rules.drafts_defined(scenario.padded, scenario.num_spec_tokens)
    mismatches, compared, skipped = [], 0, 0
    for r, rid in enumerate(iteration.rids):
        if not iteration.compared[r]:
            continue
        history = iteration.histories[r]
        aux = scenario.method == "eagle3"  # eagle3: the target's auxiliary layers, combined by the model
        hidden = (target.sequence_aux_hidden if aux else target.sequence_hidden)(history[:-1])
        mrope = iteration.mrope[r] if iteration.mrope else None
        k, mml = scenario.num_spec_tokens, scenario.max_model_len
        want = reference_drafts(ref_model, history, hidden, k, mml, mrope)[:defined]
        if rules.first_draft_repeated(iteration.case):
            want = want[:1] * len(want)  # by design: draft 1, K times (Rules.prefill_batches_draft_once)
        else:
            want = want[: drafts_over_intact_kv(iteration.case, r, scenario.padded, rules)]
        bad, n, s = compare_drafts(iteration.index, rid, drafts[r], want, tolerance)
        mismatches += bad
        compared += n
        skipped += s
    return mismatches, compared, skipped
