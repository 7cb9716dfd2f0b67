"""How many reference values a divergence decides: where its rule and the spec's expectations differ.

For one call, the reference's first-pass inputs (with its longest query) and every later step's
positions, seq_lens, slots and host computed counts (and, for a draft whose metadata carries its RoPE,
every call's rotated positions) are computed twice: under the implementation's
rules, and under the same rules with one divergence's fields reverted to docs/DESIGN.md's. The values that differ are those the
divergence governed; a run reports their count per divergence, so a green run says how much of
what it compared followed a documented divergence rather than the spec.
"""

from __future__ import annotations

import dataclasses

from sim.oracle import reference
from sim.oracle.cases import BatchCase
from sim.oracle.rules import CORE, Rules


def _values(case: BatchCase, padded: bool, rules: Rules, longest: bool) -> list:
    first = reference.first_pass(case, padded, rules)
    later = range(2, case.config.num_spec_tokens + 1)
    steps = [reference.step(case, j, padded, rules) for j in later]
    computed = [reference.num_computed(case, j, padded, rules) for j in later]
    query = [reference.max_query_len(case, padded, rules)] if longest else []
    rope = [] if rules.draft_attn == "gqa" else [reference.rope_positions(case, j, padded, rules) for j in (1, *later)]
    return [*first, *query, *(field for step in steps for field in step), *computed, *rope]


def _reverted(rules: Rules, fields) -> Rules:
    return dataclasses.replace(rules, **{name: getattr(CORE, name) for name in fields})


def _differences(got_values: list, want_values: list) -> int:
    count = 0
    for got, want in zip(got_values, want_values):
        if isinstance(got, list) and isinstance(want, list):
            count += sum(a != b for a, b in zip(got, want)) + abs(len(got) - len(want))
        else:
            count += got != want
    return count


def governed_by(case: BatchCase, padded: bool, rules: Rules, fields_of: dict, longest: bool = True) -> dict:
    """For each entry of ``fields_of`` (a key -> the fields a divergence decides), how many of the call's
    expected metadata values change when those fields of ``rules`` revert to the spec; the call's own
    expectations under ``rules`` are computed once for all of them (``longest``: the first pass's
    longest query among them, which no serving run compares)."""
    ours, counts = None, {}
    for key, fields in fields_of.items():
        spec = _reverted(rules, fields)
        if spec == rules:
            counts[key] = 0
            continue
        ours = _values(case, padded, rules, longest) if ours is None else ours
        counts[key] = _differences(ours, _values(case, padded, spec, longest))
    return counts


def governed_values(case: BatchCase, padded: bool, rules: Rules, fields, longest: bool = True) -> int:
    """``governed_by`` of one divergence's ``fields``."""
    return governed_by(case, padded, rules, {None: fields}, longest)[None]


def decides(case: BatchCase, padded: bool, rules: Rules, fields, longest: bool = True) -> bool:
    """Whether reverting ``fields`` of ``rules`` to the spec changes anything the call is held to: a
    metadata value (``governed_values``) or, under ``prefill_batches_draft_once``, its drafts."""
    spec = _reverted(rules, fields)
    return spec.first_draft_repeated(case) != rules.first_draft_repeated(case) or bool(
        governed_values(case, padded, rules, fields, longest)
    )
