"""Checks of the core's input preparation against the from-scratch reference.

Each check takes the ops under test, so the same check runs on ``CoreOps``
(it must pass) and on deliberately broken variants (it must fail). ``rules``
are the implementation's documented divergences (``sim.oracle.rules``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from sim.impls.kit.host_reads import device_syncs
from sim.oracle import reference
from sim.oracle.cases import BatchCase, to_batch
from sim.oracle.compare import keep_stale
from sim.oracle.governed import decides
from sim.oracle.rules import CORE, Rules


def _eq(name: str, got, want, case: BatchCase):
    got = got.tolist() if hasattr(got, "tolist") else list(got)
    if got != list(want):
        bad = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
        raise AssertionError(
            f"{name} differs from the reference at index {bad}:\n  got  {got[bad : bad + 8]}"
            f"\n  want {list(want)[bad : bad + 8]}\nreplay: {case.replay_text()}"
        )


# The dtypes mtp/batch.py documents: a float count or id equals an int one by value, so checked apart.
NEXT_DTYPES = {"next_token_ids": torch.int32, "valid_counts": torch.int32}
FIRST_DTYPES = {
    "num_rejected": torch.int32,
    "token_indices": torch.int64,
    "query_start_loc": torch.int32,
    "seq_lens": torch.int32,
    "accepted_seq_lens": torch.int32,
    "slot_mapping": torch.int64,
    "sample_indices": torch.int64,
}
STEP_DTYPES = {"positions": torch.int64, "seq_lens": torch.int32, "slot_mapping": torch.int64}


def _is_core(ops) -> bool:
    """The core's ops (or a broken variant of them), not an adapter's."""
    return type(ops).__module__.split(".")[0] in ("mtp", "tests")


def _dtypes(got, want: dict, case: BatchCase) -> None:
    for name, dtype in want.items():
        if getattr(got, name).dtype != dtype:
            raise AssertionError(
                f"{name}.dtype={getattr(got, name).dtype}, documented {dtype}\nreplay: {case.replay_text()}"
            )


def accepting_fixes(check):
    """``check(ops, case, padded, device, rules)`` where a known defect of ``rules`` is an alternative,
    never the expectation (``Rules.defects``): a call that fails under ``rules`` passes if it matches the
    spec for the defects that decide its values (each alone, then all); if none matches, the failure
    names what each alternative expected too. What the ops do not decide (``decided_in_the_loop``:
    an intermediate the propose loop may still change) is accepted either way."""

    @functools.wraps(check)
    def checked(ops, case: BatchCase, padded: bool, device, rules: Rules = CORE) -> None:
        try:
            return check(ops, case, padded, device, rules)
        except AssertionError as failure:
            notes = []
            for label, alternative in alternatives_of(ops, case, padded, rules):
                try:
                    return check(ops, case, padded, device, alternative)
                except AssertionError as other:
                    notes.append(f"under {label}: {str(other).splitlines()[0]}")
            if notes:
                failure.args = ("\n".join([str(failure), *notes]), *failure.args[1:])  # its type kept
            raise

    return checked


def alternatives_of(ops, case: BatchCase, padded: bool, rules: Rules) -> list[tuple[str, Rules]]:
    """(what it is, the rules) of each expectation ``accepting_fixes`` accepts besides ``rules``."""
    deciding = [d for d, fields in rules.defects if decides(case, padded, rules, fields)]
    out = [(f"the spec for {', '.join(fixed)}", alt) for fixed, alt in rules.alternatives(deciding)]
    for name in getattr(ops, "decided_in_the_loop", ()):
        out.append((f"{name}={not getattr(rules, name)} (the loop decides it)", _flipped(rules, name)))
    return out


def _flipped(rules: Rules, name: str) -> Rules:
    return dataclasses.replace(rules, **{name: not getattr(rules, name)})


@accepting_fixes
def check_first_pass(ops, case: BatchCase, padded: bool, device, rules: Rules = CORE) -> None:
    """Steps 1-3 equal the reference: next tokens, compaction, sample rows, input ids, and their dtypes."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded)
    got = ops.prepare_call(cfg, batch, sampled)
    want = reference.first_pass(case, padded, rules)
    if _is_core(ops):
        _dtypes(got.next, NEXT_DTYPES, case)
        _dtypes(got.first, FIRST_DTYPES, case)
    _eq("next_token_ids", got.next.next_token_ids, want.next_tokens, case)
    _eq("valid_counts", got.next.valid_counts, want.valid_counts, case)
    _eq("num_rejected", got.first.num_rejected, want.num_rejected, case)
    if cfg.method != "draft_model":  # a draft model's rows are not the batch's: compared by ids and positions
        _eq("token_indices", got.first.token_indices, want.token_indices, case)
    _eq("query_start_loc", got.first.query_start_loc, want.query_start_loc, case)
    _eq("query_start_loc_cpu", got.first.query_start_loc_cpu, want.query_start_loc, case)
    _eq("seq_lens", got.first.seq_lens, want.seq_lens, case)
    _eq("accepted_seq_lens", got.first.accepted_seq_lens, want.accepted_seq_lens, case)
    tail = [-1] * (cfg.max_num_tokens - len(want.slot_mapping))
    _eq("slot_mapping", got.first.slot_mapping, want.slot_mapping + tail, case)
    _eq("sample_indices", got.first.sample_indices, want.sample_indices, case)
    ids = want.input_ids
    if rules.stale_last_row and len(ids) - 1 not in want.sample_indices:
        ids = ids[:-1] + [int(got.input_ids[-1])]  # not compared: an old buffer value, by design
    ids = keep_stale(ids, got.input_ids, rules.unwritten_first_pass_rows(want.query_start_loc, want.sample_indices))
    _eq("input_ids", got.input_ids, ids, case)
    positions = keep_stale(
        want.positions, got.positions, rules.unwritten_first_pass_rows(want.query_start_loc, want.sample_indices)
    )
    _eq("positions", got.positions, positions, case)
    _eq_max_query_len(got, case, padded, rules)


def _eq_max_query_len(got, case: BatchCase, padded: bool, rules: Rules) -> None:
    longest = reference.max_query_len(case, padded, rules)
    if got.first.max_query_len != longest:
        raise AssertionError(f"max_query_len={got.first.max_query_len}, want {longest}\nreplay: {case.replay_text()}")


def check_max_query_len(ops, case: BatchCase, padded: bool, device, rules: Rules = CORE) -> None:
    """The longest query of the first pass, as the call's input preparation hands it to the attention
    builder (no later code changes it before the builder reads it; no serving run compares it)."""
    batch, sampled = to_batch(case, device.torch_device, padded)
    _eq_max_query_len(ops.prepare_call(case.config, batch, sampled), case, padded, rules)


@accepting_fixes
def check_steps(ops, case: BatchCase, padded: bool, device, rules: Rules = CORE) -> None:
    """Steps j = 2..K: positions, seq_lens and slots equal the reference (the core: their dtypes too)."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded)
    prepared = ops.prepare_call(cfg, batch, sampled)
    core = _is_core(ops)
    for j in range(2, cfg.num_spec_tokens + 1):
        want = reference.step(case, j, padded, rules)
        # The step as a host int and, for the core, as the one-element device tensor its graphs read.
        for step in (j, torch.tensor([j], device=device.torch_device)) if core else (j,):
            got = ops.advance_step(
                cfg, prepared.base_positions, prepared.first.accepted_seq_lens, batch.block_table, step
            )
            if core:
                _dtypes(got, STEP_DTYPES, case)
            _eq(f"step {j} positions", got.positions, want.positions, case)
            _eq(f"step {j} seq_lens", got.seq_lens, want.seq_lens, case)
            _eq(f"step {j} slot_mapping", got.slot_mapping, want.slot_mapping, case)


def check_padded_matches_unpadded(ops, case: BatchCase, device, rules: Rules = CORE) -> None:
    """Both modes continue from the same token and sample the same batch row, and (where ``rules``
    lower padded seq_lens) later steps start from the same accepted length."""
    cfg = case.config
    runs = {}
    for padded in (True, False):
        batch, sampled = to_batch(case, device.torch_device, padded)
        runs[padded] = ops.prepare_call(cfg, batch, sampled)
    p, u = runs[True], runs[False]
    _eq("next_token_ids (padded vs unpadded)", p.next.next_token_ids, u.next.next_token_ids.tolist(), case)
    rows_p = p.first.token_indices[p.first.sample_indices]
    rows_u = u.first.token_indices[u.first.sample_indices]
    _eq("sampled batch rows (padded vs unpadded)", rows_p, rows_u.tolist(), case)
    _eq(
        "sample-row input ids (padded vs unpadded)",
        p.input_ids[p.first.sample_indices],
        u.input_ids[u.first.sample_indices].tolist(),
        case,
    )
    if rules.padded_seq_lens_lowered and "padded_seq_lens_lowered" not in getattr(ops, "decided_in_the_loop", ()):
        accepted = u.first.accepted_seq_lens.tolist()
        _eq("accepted_seq_lens (padded vs unpadded)", p.first.accepted_seq_lens, accepted, case)


def check_padded_path_never_syncs(ops, case: BatchCase, device, host_reads=()) -> None:
    """Steps 1-4 in padded mode read nothing back from the device. ``host_reads``: the reads of host
    tensors an implementation names (``sim.impls.kit.host_reads``), which a CPU run cannot tell from syncs.
    A first call outside the watch builds whatever an implementation builds lazily."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded=True)
    ops.prepare_call(cfg, batch, sampled)
    with device.watch_host_syncs() as log:
        prepared = ops.prepare_call(cfg, batch, sampled)
        for j in range(2, cfg.num_spec_tokens + 1):
            ops.advance_step(cfg, prepared.base_positions, prepared.first.accepted_seq_lens, batch.block_table, j)
    syncs = device_syncs(log, host_reads)
    if syncs:
        sites = ", ".join(f"{op} at {site} x{n}{_code(log, site)}" for (op, site), n in syncs.items())
        total = sum(syncs.values())
        raise AssertionError(f"padded path made {total} host syncs: {sites}\nreplay: {case.replay_text()}")


def _code(log, site: str) -> str:
    frame = log.frames.get(site)
    return f" ({frame.name}: {frame.line.strip()})" if frame is not None and frame.line else ""


def check_discarded_samples_ignored(ops, case: BatchCase, device) -> None:
    """Unpadded mode: a discarded request's list may still hold its thrown-away
    sample (vLLM may hand it); the call must come out as with an empty list."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded=False)
    if not sampled.discarded.any():
        return
    lists = [ids or r.sampled[:1] if d else ids for ids, d, r in zip(sampled.lists, sampled.discarded, case.requests)]
    got = ops.prepare_call(cfg, batch, dataclasses.replace(sampled, lists=lists))
    want = ops.prepare_call(cfg, batch, sampled)
    for name in ("next_token_ids", "valid_counts"):
        _eq(f"{name} with a discarded sample listed", getattr(got.next, name), getattr(want.next, name).tolist(), case)
    for name in ("num_rejected", "token_indices", "seq_lens", "accepted_seq_lens", "sample_indices"):
        _eq(
            f"{name} with a discarded sample listed", getattr(got.first, name), getattr(want.first, name).tolist(), case
        )
    _eq("input_ids with a discarded sample listed", got.input_ids, want.input_ids.tolist(), case)


def check_int64_padded_ids_accepted(ops, case: BatchCase, device) -> None:
    """Padded mode: sampled ids handed as int64 (the dtype of an argmax) give the same next ids,
    int32 as documented, as the int32 ids ``SampledTokens`` documents."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded=True)
    want = ops.prepare_call(cfg, batch, sampled)
    got = ops.prepare_call(cfg, batch, dataclasses.replace(sampled, padded=sampled.padded.long()))
    _dtypes(got.next, NEXT_DTYPES, case)
    _eq("next_token_ids from int64 ids", got.next.next_token_ids, want.next.next_token_ids.tolist(), case)
