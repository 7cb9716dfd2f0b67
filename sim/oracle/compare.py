"""Comparing a proposer's drafts and per-step metadata with the reference.

Integer metadata must match exactly. A draft token must match wherever the
reference's top-1/top-2 logit margin exceeds the device dtype's tolerance;
below it either of the two is accepted and that request's later drafts are
not compared (they continue from a different token).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import NamedTuple

import torch

from mtp.trace import Phase, StepRecord
from sim.oracle import reference
from sim.oracle.cases import BatchCase
from sim.oracle.defect_drafts import CallInputs, defect_drafts, is_modelled
from sim.oracle.reference_drafts import RefDraft, reference_drafts
from sim.oracle.rules import CORE, Rules

MARGIN_TOLERANCE = {torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 1e-1}


class Mismatch(NamedTuple):
    iteration: int
    request: int | None  # the request's id, or None for batch-wide metadata
    what: str
    got: object
    want: object
    also: bool = False  # what another expectation (a known defect's alternative) wanted first, beside the nearest

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


def first_pass_rows(case: BatchCase, padded: bool, captured: dict | None, rules: Rules = CORE) -> tuple[int, int]:
    """(rows the first pass must run, of which the batch's): its tokens, padded to a captured size."""
    if rules.eager_batches_unpadded and not is_uniform_decode(case):
        captured = None  # run eagerly, at its own rows
    real = len(reference.first_pass(case, padded, rules).token_indices)
    return expected_rows(real, (captured or {}).get(Phase.FIRST, [])), real


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
    if not any((captured or {}).values()):  # no graph captured at all (e.g. vLLM refused every size): eager
        rules = dataclasses.replace(rules, graph_mode="eager")
    ref = reference.first_pass(case, padded, rules)
    first = trace[0]
    out = []
    calls = 1 if rules.first_draft_repeated(case) else case.config.num_spec_tokens  # one per draft step
    if len(trace) != calls:
        out.append(Mismatch(it, None, "model calls", len(trace), calls))
    ids = ref.input_ids
    if rules.stale_last_row and len(ids) - 1 not in ref.sample_indices:
        ids = ids[:-1] + first.input_ids[len(ids) - 1 :].tolist()[:1]  # an old buffer value, by design
    stale = rules.unwritten_first_pass_rows(ref.query_start_loc, ref.sample_indices)
    positions = ref.positions
    out += _first_diff("first pass input_ids", it, first.input_ids, keep_stale(ids, first.input_ids, stale))
    out += _first_diff("first pass positions", it, first.positions, keep_stale(positions, first.positions, stale))
    out += _first_diff("first pass seq_lens", it, first.seq_lens, ref.seq_lens)
    out += _first_diff("first pass slot_mapping", it, first.slot_mapping, ref.slot_mapping)
    out += _first_diff("first pass query_start_loc", it, first.query_start_loc, ref.query_start_loc)
    out += _first_diff("first pass sample_indices", it, first.sample_indices, ref.sample_indices)
    if rules.eager_batches_unpadded and not is_uniform_decode(case):
        captured = None  # run eagerly, at its own rows
    for rec in trace:
        first_rows = rec.step == 1 or rules.steps_at_first_pass_rows
        real = len(ref.token_indices) if first_rows else len(case.requests)
        want_rows = expected_rows(real, (captured or {}).get(Phase.FIRST if rec.step == 1 else Phase.STEP, []))
        dp_padded = first_rows and rules.dp > 1 and rec.rows > want_rows  # to a peer's: checked across ranks
        if rec.rows != want_rows and not dp_padded:
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
        out += _first_diff(f"step {rec.step} query_start_loc", it, rec.query_start_loc, want.query_start_loc)
        out += _first_diff(f"step {rec.step} slot_mapping", it, rec.slot_mapping, want.slot_mapping)
    for rec in trace:
        if rec.rope_positions is not None:  # the metadata carries the rotation (MLA): the positions it names
            want_rope = reference.rope_positions(case, rec.step, padded, rules)
            out += _first_diff(f"step {rec.step} rope positions", it, rec.rope_positions, want_rope)
        if rec.num_computed_tokens is not None:
            want_computed = reference.num_computed(case, rec.step, padded, rules)  # the real requests' (graph
            got_computed = rec.num_computed_tokens[: len(want_computed)]  # padding's requests follow them)
            out += _first_diff(f"step {rec.step} num_computed_tokens", it, got_computed, want_computed)
    return out


def replays_graph(case: BatchCase, padded: bool, captured: dict[str, list[int]] | None, rules: Rules) -> bool:
    """Whether a call of ``case`` replays captured draft graphs: a first-pass size captured holds its
    first pass's rows (a graph is dispatched by them), and (under ``graphs_uniform_decode_only``) its
    batch is a uniform decode."""
    if rules.graphs_uniform_decode_only and not is_uniform_decode(case):
        return False
    rows = len(reference.first_pass(case, padded, rules).token_indices)
    return any(size >= rows for size in (captured or {}).get(Phase.FIRST, []))


def steps_replay_graph(case: BatchCase, captured: dict[str, list[int]] | None) -> bool:
    """Whether a call of ``case`` replays captured graphs of its draft steps 2..K: a step size captured holds its
    requests (one row each: a step graph is dispatched by them)."""
    return any(size >= len(case.requests) for size in (captured or {}).get(Phase.STEP, []))


def is_uniform_decode(case: BatchCase) -> bool:
    """A uniform decode as vllm-ascend's runner decides it: ``num_spec_tokens + 1`` query tokens per
    request, and no request on its first chunk (a prompt of ``num_spec_tokens + 1`` tokens is a prefill)."""
    k = case.config.num_spec_tokens
    return bool(case.requests) and all(r.query_len == k + 1 and r.num_computed > 0 for r in case.requests)


def keep_stale(want: list[int], got, rows: set[int]) -> list[int]:
    """``want`` with ``got``'s values at ``rows``: rows an implementation leaves unwritten by design."""
    got = got.tolist() if hasattr(got, "tolist") else list(got)
    return [got[i] if i in rows and i < len(got) else w for i, w in enumerate(want)]


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


def misplaced_writes(case: BatchCase, padded: bool, rules: Rules) -> set[int]:
    """The slots this call's draft steps write where the block table does not put the writer's
    position, or into the writer's accepted prefix (a restarted position): they hold another position's
    KV until a first pass writes them again (``defect_drafts.CallInputs.clobbered``)."""
    if rules.first_draft_repeated(case):
        return set()
    table = dataclasses.replace(rules, slots_from_block_table=True)
    vocab, extra = case.config.vocab_size, case.config.extra_rows_per_request  # a draft model's: its next token's
    accepted = [r.seq_len - reference.rejected(r, reference.next_token(r, vocab)[1]) + extra for r in case.requests]
    out = set()
    for j in range(2, case.config.num_spec_tokens + 1):
        got, want = reference.step(case, j, padded, rules), reference.step(case, j, padded, table)
        for slot, own, pos, n in zip(got.slot_mapping, want.slot_mapping, got.positions, accepted):
            if slot >= 0 and (slot != own or pos < n):
                out.add(slot)
    return out | _misrotated_prefix(case, padded, rules, accepted)


def _misrotated_prefix(case: BatchCase, padded: bool, rules: Rules, accepted: list[int]) -> set[int]:
    """The slots of the first pass's rows of an accepted position that it rotates at another position
    (``Rules.rope_from_last_build``): their KV is no later first pass's to rewrite."""
    if not rules.rotates_at_last_build:
        return set()
    first = reference.first_pass(case, padded, rules)
    rope = reference.rope_positions(case, 1, padded, rules)
    out = set()
    for r in range(len(case.requests)):
        for row in range(first.query_start_loc[r], first.query_start_loc[r + 1]):
            pos = first.positions[row]
            if rope[row] != pos and pos < accepted[r] and first.slot_mapping[row] >= 0:
                out.add(first.slot_mapping[row])
    return out


def first_pass_slots(case: BatchCase, padded: bool, rules: Rules) -> set[int]:
    """The slots the first pass writes (each kept row's, from the block table)."""
    return {s for s in reference.first_pass(case, padded, rules).slot_mapping if s >= 0}


class DraftComparison(NamedTuple):
    """One call's drafts against the reference: mismatches, and how many drafts were compared (and at
    which draft positions), skipped as near ties (or after one), and not comparable because they read
    a key no rule defines."""

    mismatches: list[Mismatch]
    compared: int
    ambiguous: int
    undefined: int
    compared_at: Counter  # draft position (1-based) -> drafts compared there


class KvBefore(NamedTuple):
    """The paged cache's K and V before a call, and the slots misplaced writes of earlier calls left
    holding another position's KV (``misplaced_writes``, less what first passes rewrote since)."""

    k: torch.Tensor
    v: torch.Tensor
    clobbered: frozenset[int] = frozenset()


def compare_iteration_drafts(
    iteration, drafts: list[list[int]], ref_model, target, scenario, tolerance: float, rules: Rules = CORE, kv=None
) -> DraftComparison:
    """One serving iteration's drafts against from-scratch drafts, for every request whose drafts
    are used. Under rules with a KV defect (``defect_drafts.is_modelled``) the reference is the defect
    model, which reads ``kv`` (a ``KvBefore``) where the defect makes steps read what the cache held."""
    modelled = is_modelled(rules, scenario.padded)
    if modelled and kv is None:
        raise ValueError(f"rules={rules!r}: the defect model reads the cache before the call (kv=KvBefore(...))")
    aux = scenario.method == "eagle3"  # eagle3: the target's auxiliary layers, combined by the model
    hidden = [(target.sequence_aux_hidden if aux else target.sequence_hidden)(h[:-1]) for h in iteration.histories]
    if modelled:
        call = CallInputs(
            iteration.case, scenario.padded, iteration.histories, hidden, iteration.hidden.cpu(),
            (kv.k, kv.v), kv.clobbered, iteration.mrope,
        )  # fmt: skip
        wanted = defect_drafts(ref_model, call, rules, tolerance)
    out = DraftComparison([], 0, 0, 0, Counter())
    for r, rid in enumerate(iteration.rids):
        if not iteration.compared[r]:
            continue
        if modelled:
            want, undefined, after_tie = wanted[r]
        else:
            mrope = iteration.mrope[r] if iteration.mrope else None
            k, mml = scenario.num_spec_tokens, scenario.max_model_len
            want, undefined, after_tie = (
                reference_drafts(ref_model, iteration.histories[r], hidden[r], k, mml, mrope),
                0,
                0,
            )
            if rules.first_draft_repeated(iteration.case):
                want = want[:1] * len(want)  # by design: draft 1, K times (Rules.prefill_batches_draft_once)
        bad, n, s = compare_drafts(iteration.index, rid, drafts[r], want, tolerance)
        out.compared_at.update(range(1, n + 1))
        out = out._replace(
            mismatches=out.mismatches + bad,
            compared=out.compared + n,
            ambiguous=out.ambiguous + s + after_tie,
            undefined=out.undefined + undefined,
        )
    return out
