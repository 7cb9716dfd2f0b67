"""The core's quantities computed from their definitions, one request at a time.

Plain Python loops over a ``BatchCase``; nothing here calls ``mtp``. Each
function restates a step of docs/DESIGN.md "One propose call" as directly as it
can be written, so that a disagreement with the core points at the core.
``rules`` (``sim.oracle.rules``) carries an implementation's documented
divergences; the default is docs/DESIGN.md's.
"""

from __future__ import annotations

from typing import NamedTuple

from sim.oracle.cases import BatchCase, RequestCase, slot_of
from sim.oracle.rules import CORE, Rules


class RefFirstPass(NamedTuple):
    """Expected first-pass inputs, as plain lists (padded or unpadded mode)."""

    next_tokens: list[int]
    valid_counts: list[int]
    num_rejected: list[int]
    token_indices: list[int]
    query_start_loc: list[int]
    seq_lens: list[int]
    accepted_seq_lens: list[int]
    slot_mapping: list[int]  # rows of the first pass only (no -1 tail)
    sample_indices: list[int]
    input_ids: list[int]
    positions: list[int]


class RefStep(NamedTuple):
    positions: list[int]
    seq_lens: list[int]
    slot_mapping: list[int]
    query_start_loc: list[int]  # one query row per request, unless the rules say otherwise


def next_token(req: RequestCase, vocab_size: int) -> tuple[int, int]:
    """(next token, valid sample count) of one request."""
    if req.discarded:
        return req.tokens[-1], 0
    valid = [t for t in req.sampled if 0 <= t < vocab_size]
    if not valid:
        return req.tokens[-1], 0
    return valid[-1], len(valid)


def rejected(req: RequestCase, valid: int) -> int:
    return req.num_drafts + 1 - valid if req.num_drafts > 0 else 0


def first_pass(case: BatchCase, padded: bool, rules: Rules = CORE) -> RefFirstPass:
    cfg = case.config
    if cfg.method == "draft_model":
        return _draft_model_first_pass(case, padded, rules)
    out = {f: [] for f in RefFirstPass._fields}
    flat_tokens, flat_slots = [], []
    row = 0
    for req in case.requests:
        nxt, valid = next_token(req, cfg.vocab_size)
        rej = rejected(req, valid)
        out["next_tokens"].append(nxt)
        out["valid_counts"].append(valid)
        out["num_rejected"].append(rej)
        kept = req.query_len if padded else req.query_len - rej
        out["query_start_loc"].append(len(out["token_indices"]))
        for i in range(kept):
            out["token_indices"].append(row + i)
            pos = req.num_computed + i
            out["positions"].append(pos)
            flat_tokens.append(req.tokens[i])
            flat_slots.append(slot_of(req.blocks, pos, cfg.block_size))
        # The last accepted token sits at position seq_len - rej - 1.
        out["sample_indices"].append(out["query_start_loc"][-1] + req.query_len - rej - 1)
        out["seq_lens"].append(req.seq_len if padded else req.seq_len - rej)
        out["accepted_seq_lens"].append(rules.step_seq_base(req.seq_len, req.seq_len - rej, padded))
        row += req.query_len
    out["query_start_loc"].append(len(out["token_indices"]))
    out["slot_mapping"] = flat_slots
    ids = [flat_tokens[i + 1] if i + 1 < len(flat_tokens) else flat_tokens[i] for i in range(len(flat_tokens))]
    for r, idx in enumerate(out["sample_indices"]):
        ids[idx] = out["next_tokens"][r]
    out["input_ids"] = ids
    return RefFirstPass(**out)


def _draft_model_first_pass(case: BatchCase, padded: bool, rules: Rules) -> RefFirstPass:
    """A draft model's first pass: per request its accepted tokens at their own positions, then its
    next token at the next position (sampled there), then, padded, one inert row per rejected token
    (id 0, position 0, no KV). A row at or past ``max_model_len`` writes no KV."""
    cfg = case.config
    out = {f: [] for f in RefFirstPass._fields}
    row = 0
    for req in case.requests:
        nxt, valid = next_token(req, cfg.vocab_size)
        rej = rejected(req, valid)
        accepted = req.query_len - rej
        out["next_tokens"].append(nxt)
        out["valid_counts"].append(valid)
        out["num_rejected"].append(rej)
        out["query_start_loc"].append(len(out["input_ids"]))
        out["sample_indices"].append(len(out["input_ids"]) + accepted)
        for i in range(accepted + 1):
            pos = req.num_computed + i
            out["input_ids"].append(req.tokens[i] if i < accepted else nxt)
            out["positions"].append(pos)
            out["slot_mapping"].append(slot_of(req.blocks, pos, cfg.block_size) if pos < cfg.max_model_len else -1)
            out["token_indices"].append(row + min(i, accepted - 1))
        for _ in range(rej if padded else 0):
            out["input_ids"].append(0)
            out["positions"].append(0)
            out["slot_mapping"].append(-1)
            out["token_indices"].append(row + accepted - 1)
        out["seq_lens"].append((req.seq_len if padded else req.seq_len - rej) + 1)
        out["accepted_seq_lens"].append(rules.step_seq_base(req.seq_len, req.seq_len - rej, padded) + 1)
        row += req.query_len
    out["query_start_loc"].append(len(out["input_ids"]))
    return RefFirstPass(**out)


def max_query_len(case: BatchCase, padded: bool, rules: Rules = CORE) -> int:
    """The first pass's longest query: of the compacted batch when unpadded (unless ``rules`` say otherwise)."""
    extra = case.config.extra_rows_per_request  # draft_model: the next token's row
    if padded or not rules.max_query_len_compacted:
        return max(req.query_len for req in case.requests) + extra
    vocab = case.config.vocab_size
    return max(req.query_len - rejected(req, next_token(req, vocab)[1]) for req in case.requests) + extra


def step(case: BatchCase, j: int, padded: bool = True, rules: Rules = CORE) -> RefStep:
    """Metadata of draft step ``j`` (2-based) for every request (``padded`` matters only under ``rules``)."""
    cfg = case.config
    out = RefStep([], [], [], list(range(len(case.requests) + 1)))
    bases = []  # each request's host length the steps advance from: the target's, or lowered by its rejections
    extra = cfg.extra_rows_per_request  # draft_model: the steps go on from the next token's row, one further
    for req in case.requests:
        accepted = req.seq_len - rejected(req, next_token(req, cfg.vocab_size)[1])
        bases.append((accepted + extra, rules.step_seq_base(req.seq_len, accepted, padded) + extra))
    bound = min(max(base for _, base in bases) + cfg.num_spec_tokens, cfg.max_model_len)  # over those lengths
    for req, (accepted, base) in zip(case.requests, bases):
        pos, _, _ = rules.step(accepted - 1, base, j, cfg.max_model_len)
        state = rules.state_step(j)  # the step whose seq_len and slot this one gets
        _, seq_len, _ = rules.step(accepted - 1, base, state, cfg.max_model_len)
        out.positions.append(pos)
        out.seq_lens.append(rules.step_seq_len(seq_len, base, state, cfg.max_model_len, bound))
        out.slot_mapping.append(
            rules.step_slot(
                lambda p, blocks=req.blocks: table_slot(blocks, p, cfg.block_size),
                accepted - 1,
                state,
                cfg.max_model_len,
            )
        )
    if rules.steps_read_first_pass_lengths:  # the first pass's offsets and lengths, where the step's own should be
        first = first_pass(case, padded, rules)
        out.seq_lens[:] = first.seq_lens
        out.query_start_loc[:] = first.query_start_loc
    return out


def rope_positions(case: BatchCase, j: int, padded: bool = True, rules: Rules = CORE) -> list[int]:
    """The position each row of model call ``j`` (1: the first pass, its kept rows) is rotated at: the
    row's own, unless ``rules.rotates_at_last_build`` holds for a draft of two drafts or more: then
    every call but the last rotates its first B rows at the last step's positions (request i's at row i):
    steps 2..K-1 all of them, the first pass its first B rows (an SFA draft's builder writes every row
    it builds), of an MLA draft those among the rows before its first prefill (the MLA builder's decodes:
    requests of at most ``num_spec_tokens + 1`` kept rows, from the first); and
    unless ``rules.graph_steps_rope_of_first_pass`` holds (for a call that replays a graph): then every
    step 2..K rotates row i at the first pass's row i's position."""
    k = case.config.num_spec_tokens
    first = first_pass(case, padded, rules)
    if j == 1:
        own = first.positions
    else:
        own = step(case, j, padded, rules).positions
        if rules.rotates_steps_at_first_pass:
            return rope_positions(case, 1, padded, rules)[: len(own)]
    if not rules.rotates_at_last_build or k < 2 or j == k:
        return own
    last = step(case, k, padded, rules).positions
    if j > 1:
        return last
    qsl = first.query_start_loc
    prefills = [r for r in range(len(case.requests)) if qsl[r + 1] - qsl[r] > k + 1]
    decode_rows = qsl[prefills[0]] if prefills and rules.draft_attn == "mla" else qsl[-1]
    return [last[i] if i < min(len(last), decode_rows) else p for i, p in enumerate(own)]


def table_slot(blocks: list[int], position: int, block_size: int) -> int:
    """The slot a step computes from its request's block-table row at ``position``: past the row's
    blocks the table holds -1 (``VerifiedBatch.block_table``), so ``-block_size + offset``, a slot
    that writes no KV (only a defect's state, run ahead of its position, reaches there)."""
    if position // block_size >= len(blocks):
        return -block_size + position % block_size
    return slot_of(blocks, position, block_size)


def num_computed(case: BatchCase, j: int, padded: bool = True, rules: Rules = CORE) -> list[int]:
    """Each request's count of tokens before its query at model call ``j`` (1: the first pass): the
    tokens already in KV at the first pass; at a draft step, all but the step's one query token."""
    if j == 1:
        return [req.num_computed for req in case.requests]
    if rules.num_computed_from_first_pass:
        return [req.num_computed + rules.state_step(j) - 1 for req in case.requests]
    return [seq_len - 1 for seq_len in step(case, j, padded, rules).seq_lens]


def pcp_rows(query_lens: list[int], split: list[bool], size: int) -> list[list[int]]:
    """Per rank, the batch rows it runs (-1 for padding), request by request."""
    ranks = [[] for _ in range(size)]
    start = 0
    for qlen, is_split in zip(query_lens, split):
        if not is_split:
            for rows in ranks:
                rows.extend(range(start, start + qlen))
        else:
            padded = qlen
            while padded % (2 * size):
                padded += 1
            chunk = padded // (2 * size)
            for rank, rows in enumerate(ranks):
                for c in (rank, 2 * size - 1 - rank):
                    for local in range(c * chunk, (c + 1) * chunk):
                        rows.append(start + local if local < qlen else -1)
        start += qlen
    return ranks


def pcp_restore(ranks: list[list[int]], num_tokens: int) -> list[int]:
    """For each batch row, where the all-gather (rank-major) holds it; lowest rank wins."""
    where = [None] * num_tokens
    offset = 0
    for rows in ranks:
        for i, r in enumerate(rows):
            if r >= 0 and where[r] is None:
                where[r] = offset + i
        offset += len(rows)
    return where


def mrope_first_pass(case: BatchCase, padded: bool) -> list[list[int]]:
    """M-RoPE rows the first pass runs at: the target's rows of every kept row."""
    rows = [[v for req in case.requests for v in req.mrope[i]] for i in range(3)]
    kept = first_pass(case, padded).token_indices
    return [[row[t] for t in kept] for row in rows]


def mrope_step(case: BatchCase, j: int) -> list[list[int]]:
    """M-RoPE rows of draft step ``j``: the sample row's three rows plus j - 1, all 0 on overflow."""
    cfg = case.config
    out: list[list[int]] = [[], [], []]
    for req in case.requests:
        last = req.seq_len - rejected(req, next_token(req, cfg.vocab_size)[1]) - 1  # last accepted position
        overflow = last + j - 1 >= cfg.max_model_len
        for i in range(3):
            out[i].append(0 if overflow else req.mrope[i][last - req.num_computed] + j - 1)
    return out
