"""Malformed propose inputs: a valid batch with one field broken.

Each draw returns the broken inputs, the field the error must begin with, and
what it must say of it (the value, and why it is wrong). ``MUTATIONS`` holds
one way of breaking a batch per check of ``mtp/validate.py``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from mtp.batch import NO_BACKUP, SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from sim.oracle.cases import to_batch
from tests.strategies.batches import batch_cases


class Malformed(NamedTuple):
    config: ProposerConfig
    batch: VerifiedBatch
    sampled: SampledTokens
    field: str  # what the ValueError must begin with
    mutation: str
    says: str = ""  # more the ValueError must say: the value, or why it is wrong


def _qsl_not_monotonic(cfg, b, s, r):
    """Request r given no tokens, the one before it (where there is one) a single token: the
    boundary, so that the error must name the empty request, not the one-token one."""
    qsl = b.query_start_loc_cpu.copy()
    if b.num_reqs > 1:
        r = max(r, 1)
        qsl[r] = qsl[r - 1] + 1
    qsl[r + 1] = qsl[r]  # request r gets length 0, r + 1 (if any) the tokens it gave up
    field = f"query_start_loc[{r}:{r + 2}]"
    return (
        cfg,
        dataclasses.replace(b, query_start_loc_cpu=qsl),
        s,
        field,
        f"={[int(qsl[r])] * 2}: must increase strictly",
    )


def _qsl_not_from_zero(cfg, b, s, r):
    qsl = b.query_start_loc_cpu + 1
    return cfg, dataclasses.replace(b, query_start_loc_cpu=qsl), s, "query_start_loc[0]", "=1: must be 0"


def _qsl_without_requests(cfg, b, s, r):
    qsl = b.query_start_loc_cpu[:1]
    says = "=[0]: needs shape [num_reqs + 1], num_reqs >= 1"
    return cfg, dataclasses.replace(b, query_start_loc_cpu=qsl), s, "query_start_loc", says


def _too_many_reqs(cfg, b, s, r):
    n = b.num_reqs
    says = f"={n}: more requests than the buffers hold ({n - 1})"
    return dataclasses.replace(cfg, max_num_reqs=n - 1), b, s, "num_reqs", says


def _negative_seq_len(cfg, b, s, r):
    seq = b.seq_lens_cpu.copy()
    seq[r] = -seq[r]
    qlen = int(b.query_start_loc_cpu[r + 1] - b.query_start_loc_cpu[r])
    says = f"={int(seq[r])}: shorter than its query length {qlen}"
    return cfg, dataclasses.replace(b, seq_lens_cpu=seq), s, f"seq_lens[{r}]", says


def _seq_len_past_max_model_len(cfg, b, s, r):
    seq = b.seq_lens_cpu.copy()
    seq[r] = cfg.max_model_len + 1
    says = f"={cfg.max_model_len + 1}: exceeds max_model_len={cfg.max_model_len}"
    return cfg, dataclasses.replace(b, seq_lens_cpu=seq), s, f"seq_lens[{r}]", says


def _per_request_wrong_shape(name):
    """A per-request host array with one entry more than there are requests."""

    def mutate(cfg, b, s, r):
        grown = np.append(getattr(b, f"{name}_cpu"), 1)
        n = b.num_reqs
        return (
            cfg,
            dataclasses.replace(b, **{f"{name}_cpu": grown}),
            s,
            f"{name}.shape",
            f"=({n + 1},): expected ({n},)",
        )

    mutate.__name__ = f"_{name}_wrong_shape"
    return mutate


def _negative_drafts(cfg, b, s, r):
    drafts = b.num_draft_tokens_cpu.copy()
    drafts[r] = -1
    says = f"=-1: must lie in [0, {cfg.num_spec_tokens}]"
    return cfg, dataclasses.replace(b, num_draft_tokens_cpu=drafts), s, f"num_draft_tokens[{r}]", says


def _query_shorter_than_drafts(cfg, b, s, r):
    """A request verifying as many drafts as it has tokens (it needs one more: the bonus)."""
    qlens = np.diff(b.query_start_loc_cpu)
    short = np.flatnonzero(qlens <= cfg.num_spec_tokens)
    r = int(short[r % len(short)])
    drafts = b.num_draft_tokens_cpu.copy()
    drafts[r] = q = int(qlens[r])
    says = f"={q}: a request verifying {q} drafts has at least {q + 1} tokens"
    return cfg, dataclasses.replace(b, num_draft_tokens_cpu=drafts), s, f"query_lens[{r}]", says


def _rows_short(name):
    """A per-token tensor with one row fewer than the batch has tokens."""

    def mutate(cfg, b, s, r):
        t = getattr(b, name)
        shape = tuple(t.shape)
        says = f"={(shape[0] - 1, *shape[1:])}: expected {shape}"
        return cfg, dataclasses.replace(b, **{name: t[:-1]}), s, f"{name}.shape", says

    mutate.__name__ = f"_{name}_short"
    return mutate


def _mrope_missing(cfg, b, s, r):
    says = f"=None: expected (3, {b.num_tokens}): the config uses M-RoPE"
    cfg = dataclasses.replace(cfg, uses_mrope=True)
    return cfg, dataclasses.replace(b, mrope_positions=None), s, "mrope_positions.shape", says


def _mrope_one_row_short(cfg, b, s, r):
    """M-RoPE rows given, one token's column missing: the error must show the shape it got."""
    mrope = b.positions.expand(3, -1)[:, :-1].clone()
    says = f"={(3, b.num_tokens - 1)}: expected (3, {b.num_tokens}): the config uses M-RoPE"
    cfg = dataclasses.replace(cfg, uses_mrope=True)
    return cfg, dataclasses.replace(b, mrope_positions=mrope), s, "mrope_positions.shape", says


def _mrope_unexpected(cfg, b, s, r):
    mrope = b.positions.expand(3, -1).clone()
    says = f"={(3, b.num_tokens)}: given, but the config does not use M-RoPE"
    cfg = dataclasses.replace(cfg, uses_mrope=False)
    return cfg, dataclasses.replace(b, mrope_positions=mrope), s, "mrope_positions.shape", says


def _slot_mapping_short(cfg, b, s, r):
    n = b.num_tokens
    says = f"={(n - 1,)}: needs at least {n} entries"
    return cfg, dataclasses.replace(b, slot_mapping=b.slot_mapping[: n - 1]), s, "slot_mapping.shape", says


def _block_table_extra_row(cfg, b, s, r):
    table = np.concatenate([b.block_table_cpu, b.block_table_cpu[-1:]])
    says = f"={table.shape}: expected ({b.num_reqs}, max_blocks)"
    return cfg, dataclasses.replace(b, block_table_cpu=table), s, "block_table.shape", says


def _id_out_of_vocab(cfg, b, s, r):
    lists = [list(x) for x in s.lists]
    lists[r] = (lists[r] or [0])[:-1] + [cfg.vocab_size + r]
    discarded = s.discarded.copy()
    discarded[r] = False
    field = f"sampled_token_ids[{r}][{len(lists[r]) - 1}]"
    says = f"={cfg.vocab_size + r}: not a token id in [0, {cfg.vocab_size})"
    return cfg, b, dataclasses.replace(s, lists=lists, discarded=discarded), field, says


def _block_table_too_short(cfg, b, s, r):
    """One column fewer than the furthest draft needs: drafts reach position seq_len + K - 2,
    capped below max_model_len (overflowing positions write nothing)."""
    last = np.minimum(b.seq_lens_cpu + cfg.num_spec_tokens - 2, cfg.max_model_len - 1)
    need = last // cfg.block_size + 1
    width = int(need.max()) - 1
    r = int(np.flatnonzero(need > width)[0])
    says = f"='{width} blocks': drafts up to position {int(need[r]) * cfg.block_size - 1} need {int(need[r])}"
    return cfg, dataclasses.replace(b, block_table_cpu=b.block_table_cpu[:, :width]), s, f"block_table[{r}]", says


def _discarded_wrong_shape(cfg, b, s, r):
    discarded = np.append(s.discarded, False)
    n = b.num_reqs
    return cfg, b, dataclasses.replace(s, discarded=discarded), "discarded.shape", f"=({n + 1},): expected ({n},)"


def _backup_wrong_shape(cfg, b, s, r):
    backup = np.append(s.backup, 0)
    n = b.num_reqs
    return cfg, b, dataclasses.replace(s, backup=backup), "backup.shape", f"=({n + 1},): expected ({n},)"


def _backup_not_a_token(cfg, b, s, r):
    """A backup past the vocabulary (its first id past it) or negative but not NO_BACKUP."""
    backup = s.backup.copy()
    backup[r] = cfg.vocab_size if r % 2 == 0 else NO_BACKUP - 1
    says = f"={backup[r]}: not a token id in [0, {cfg.vocab_size}), nor NO_BACKUP (-1)"
    return cfg, b, dataclasses.replace(s, backup=backup), f"backup[{r}]", says


def _with_drafts(b, r) -> int:
    """The r-th request (cyclically) among those that verified drafts, those with one draft first."""
    with_drafts = np.flatnonzero(b.num_draft_tokens_cpu > 0)
    return int(sorted(with_drafts, key=lambda i: (b.num_draft_tokens_cpu[i] != 1, i))[r % len(with_drafts)])


def _discarded_with_drafts(cfg, b, s, r):
    """A request that verified drafts marked discarded (only a partial prefill discards)."""
    r = _with_drafts(b, r)
    backup, discarded = s.backup.copy(), s.discarded.copy()
    discarded[r] = True
    if backup[r] == NO_BACKUP:  # a discarded request needs one: not the error under test
        backup[r] = 0
    says = "=True: only a partial prefill (no drafts verified) discards its sampled token"
    return cfg, b, dataclasses.replace(s, backup=backup, discarded=discarded), f"discarded[{r}]", says


def _no_backup(why):
    """Request r has no backup (NO_BACKUP) where it may need one, because it is ``why``."""

    def mutate(cfg, b, s, r):
        backup, discarded = s.backup.copy(), s.discarded.copy()
        backup[r], discarded[r] = NO_BACKUP, why == "discarded"
        lists = [list(x) for x in s.lists]
        if why == "empty list":
            lists[r] = []
        s = dataclasses.replace(s, backup=backup, discarded=discarded, lists=lists)
        if why == "padded":
            s = dataclasses.replace(s, lists=None, padded=torch.full((b.num_reqs, cfg.num_spec_tokens + 1), -1))
        return cfg, b, s, f"backup[{r}]", f"=-1: no backup, but request {r} may continue from it ({why})"

    mutate.__name__ = f"_no_backup_{why.replace(' ', '_')}"
    return mutate


def _block_unallocated(cfg, b, s, r):
    table = b.block_table_cpu.copy()
    table[r, 0] = -1
    says = "=-1: unallocated block inside the range the drafts use"
    return cfg, dataclasses.replace(b, block_table_cpu=table), s, f"block_table[{r}][0]", says


def _too_many_tokens(cfg, b, s, r):
    n = b.num_tokens
    says = f"={n}: more tokens than the buffers hold ({n - 1})"
    return dataclasses.replace(cfg, max_num_tokens=n - 1), b, s, "num_tokens", says


def _too_many_drafts(cfg, b, s, r):
    drafts = b.num_draft_tokens_cpu.copy()
    drafts[r] = k = cfg.num_spec_tokens + 1
    says = f"={k}: must lie in [0, {k - 1}]"
    return cfg, dataclasses.replace(b, num_draft_tokens_cpu=drafts), s, f"num_draft_tokens[{r}]", says


def _padded_k_mismatch(cfg, b, s, r):
    extra = torch.full((b.num_reqs, 1), -1, dtype=torch.int32)
    padded = torch.cat([torch.full((b.num_reqs, cfg.num_spec_tokens + 1), -1, dtype=torch.int32), extra], dim=1)
    n, k = b.num_reqs, cfg.num_spec_tokens
    says = f"=({n}, {k + 2}): expected ({n}, {k + 1}) for K={k}"
    return cfg, b, dataclasses.replace(s, padded=padded, lists=None), "sampled_token_ids.shape", says


def _lists_one_short(cfg, b, s, r):
    """One list fewer than requests (every backup real, so that only the count is wrong)."""
    backup = np.where(s.backup == NO_BACKUP, 0, s.backup)
    says = f"={b.num_reqs - 1}: expected {b.num_reqs}"
    return cfg, b, dataclasses.replace(s, lists=s.lists[:-1], backup=backup), "len(sampled_token_ids)", says


def _too_many_sampled(cfg, b, s, r):
    """Two more sampled ids than drafts verified (one more, the bonus token, is the most)."""
    lists, discarded = [list(x) for x in s.lists], s.discarded.copy()
    d = int(b.num_draft_tokens_cpu[r])
    lists[r], discarded[r] = [0] * (d + 2), False
    says = f"={lists[r]}: more than num_draft_tokens + 1 = {d + 1} tokens"
    return cfg, b, dataclasses.replace(s, lists=lists, discarded=discarded), f"sampled_token_ids[{r}]", says


def _none_sampled_after_drafts(cfg, b, s, r):
    """A request that verified drafts but sampled nothing (its backup real)."""
    r = _with_drafts(b, r)
    lists, backup = [list(x) for x in s.lists], s.backup.copy()
    lists[r] = []
    backup[r] = max(backup[r], 0)
    d = int(b.num_draft_tokens_cpu[r])
    says = f"=[]: a request verifying {d} drafts samples at least one token"
    return cfg, b, dataclasses.replace(s, lists=lists, backup=backup), f"sampled_token_ids[{r}]", says


def _both_forms(cfg, b, s, r):
    """Sampled tokens given as lists and as a padded tensor at once."""
    padded = torch.full((b.num_reqs, cfg.num_spec_tokens + 1), -1, dtype=torch.int32)
    says = "='padded and lists': exactly one of the two forms must be given"
    return cfg, b, dataclasses.replace(s, padded=padded), "sampled", says


MUTATIONS = [
    _qsl_not_monotonic,
    _qsl_not_from_zero,
    _qsl_without_requests,
    _too_many_reqs,
    _negative_seq_len,
    _seq_len_past_max_model_len,
    _per_request_wrong_shape("seq_lens"),
    _per_request_wrong_shape("num_draft_tokens"),
    _negative_drafts,
    _query_shorter_than_drafts,
    _rows_short("token_ids"),
    _rows_short("positions"),
    _rows_short("hidden_states"),
    _mrope_missing,
    _mrope_one_row_short,
    _mrope_unexpected,
    _slot_mapping_short,
    _block_table_extra_row,
    _id_out_of_vocab,
    _block_table_too_short,
    _block_unallocated,
    _too_many_tokens,
    _too_many_drafts,
    _padded_k_mismatch,
    _both_forms,
    _lists_one_short,
    _too_many_sampled,
    _none_sampled_after_drafts,
    _discarded_wrong_shape,
    _backup_wrong_shape,
    _backup_not_a_token,
    _discarded_with_drafts,
    _no_backup("discarded"),
    _no_backup("empty list"),
    _no_backup("padded"),
]


def applies(mutate, batch: VerifiedBatch, cfg: ProposerConfig) -> bool:
    """Whether ``mutate`` can break ``batch``: a one-token batch fits any buffer, one request fits
    any config, a request can verify as many drafts as it has tokens only if that is at most K,
    and only a batch that verified drafts has a request that must not be discarded."""
    if mutate is _too_many_tokens:
        return batch.num_tokens > 1
    if mutate is _too_many_reqs:
        return batch.num_reqs > 1
    if mutate is _query_shorter_than_drafts:
        return bool((np.diff(batch.query_start_loc_cpu) <= cfg.num_spec_tokens).any())
    if mutate in (_discarded_with_drafts, _none_sampled_after_drafts):
        return bool((batch.num_draft_tokens_cpu > 0).any())
    return True


@st.composite
def malformed_inputs(draw, mutation=None):
    """A batch broken by ``mutation`` (one of ``MUTATIONS``), or by one drawn among those that apply."""
    case = draw(batch_cases(max_reqs=8))
    batch, sampled = to_batch(case, torch.device("cpu"), padded=False)
    if mutation is None:
        mutate = draw(st.sampled_from([m for m in MUTATIONS if applies(m, batch, case.config)]))
    else:
        assume(applies(mutation, batch, case.config))
        mutate = mutation
    r = draw(st.integers(0, len(case.requests) - 1))
    cfg, batch, sampled, field, *says = mutate(case.config, batch, sampled, r)
    return Malformed(cfg, batch, sampled, field, mutate.__name__.strip("_"), *says)
