"""Checks of a propose call's inputs, on host copies only.

Every check names the field and the offending value. Nothing is clamped or
dropped: a bad batch is refused before any buffer is written, so the proposer
stays usable for the next call. No device tensor is read back here, so the
checks cost no host sync.
"""

from __future__ import annotations

import numpy as np

from mtp.batch import NO_BACKUP, SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig


def _fail(field: str, value, why: str):
    raise ValueError(f"{field}={value!r}: {why}")


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def needed_blocks(batch: VerifiedBatch, cfg: ProposerConfig) -> np.ndarray:
    """Per request, how many block-table entries the drafts may touch.

    The furthest draft position is ``seq_len - 1 + K - 1`` (no rejection; a
    draft model's one further: its first pass adds the next token's row),
    capped at the last position below ``max_model_len``; overflowing positions
    write nothing.
    """
    last = batch.seq_lens_cpu + cfg.num_spec_tokens - 2 + cfg.extra_rows_per_request
    last = np.minimum(last, cfg.max_model_len - 1)
    return last // cfg.block_size + 1


def validate_batch(batch: VerifiedBatch, cfg: ProposerConfig) -> None:
    """Raise ``ValueError`` if ``batch`` cannot be a verified batch for ``cfg``."""
    qsl = np.asarray(batch.query_start_loc_cpu)
    if qsl.ndim != 1 or len(qsl) < 2:
        _fail("query_start_loc", qsl.tolist(), "needs shape [num_reqs + 1], num_reqs >= 1")
    num_reqs = len(qsl) - 1
    if num_reqs > cfg.max_num_reqs:
        _fail("num_reqs", num_reqs, f"more requests than the buffers hold ({cfg.max_num_reqs})")
    if qsl[0] != 0:
        _fail("query_start_loc[0]", int(qsl[0]), "must be 0")
    qlens = np.diff(qsl)
    if (qlens < 1).any():
        r = _first_bad(qlens < 1)
        _fail(f"query_start_loc[{r}:{r + 2}]", qsl[r : r + 2].tolist(), "must increase strictly")
    num_tokens = int(qsl[-1])
    if num_tokens > cfg.max_num_tokens:
        _fail("num_tokens", num_tokens, f"more tokens than the buffers hold ({cfg.max_num_tokens})")
    rows = num_tokens + cfg.extra_rows_per_request * num_reqs
    if rows > cfg.max_num_tokens:
        _fail(
            "num_tokens",
            num_tokens,
            f"the first pass of method {cfg.method!r} adds a row per request: {rows} rows,"
            f" more than the buffers hold ({cfg.max_num_tokens})",
        )

    seq_lens = np.asarray(batch.seq_lens_cpu)
    if seq_lens.shape != (num_reqs,):
        _fail("seq_lens.shape", seq_lens.shape, f"expected ({num_reqs},)")
    if (seq_lens < qlens).any():
        r = _first_bad(seq_lens < qlens)
        _fail(f"seq_lens[{r}]", int(seq_lens[r]), f"shorter than its query length {int(qlens[r])}")
    if (seq_lens > cfg.max_model_len).any():
        r = _first_bad(seq_lens > cfg.max_model_len)
        _fail(f"seq_lens[{r}]", int(seq_lens[r]), f"exceeds max_model_len={cfg.max_model_len}")

    drafts = np.asarray(batch.num_draft_tokens_cpu)
    if drafts.shape != (num_reqs,):
        _fail("num_draft_tokens.shape", drafts.shape, f"expected ({num_reqs},)")
    bad = (drafts < 0) | (drafts > cfg.num_spec_tokens)
    if bad.any():
        r = _first_bad(bad)
        _fail(f"num_draft_tokens[{r}]", int(drafts[r]), f"must lie in [0, {cfg.num_spec_tokens}]")
    if (qlens < drafts + 1).any():
        r = _first_bad(qlens < drafts + 1)
        _fail(
            f"query_lens[{r}]",
            int(qlens[r]),
            f"a request verifying {int(drafts[r])} drafts has at least {int(drafts[r]) + 1} tokens",
        )

    for name, shape in (
        ("token_ids", (num_tokens,)),
        ("positions", (num_tokens,)),
        ("hidden_states", (num_tokens, cfg.target_hidden_size)),
    ):
        got = tuple(getattr(batch, name).shape)
        if got != shape:
            _fail(f"{name}.shape", got, f"expected {shape}")
    mrope = batch.mrope_positions
    if cfg.uses_mrope and (mrope is None or tuple(mrope.shape) != (3, num_tokens)):
        got = None if mrope is None else tuple(mrope.shape)
        _fail("mrope_positions.shape", got, f"expected (3, {num_tokens}): the config uses M-RoPE")
    if not cfg.uses_mrope and mrope is not None:
        _fail("mrope_positions.shape", tuple(mrope.shape), "given, but the config does not use M-RoPE")
    if batch.slot_mapping.shape[0] < num_tokens:
        _fail("slot_mapping.shape", tuple(batch.slot_mapping.shape), f"needs at least {num_tokens} entries")

    table = np.asarray(batch.block_table_cpu)
    if table.ndim != 2 or table.shape[0] != num_reqs:
        _fail("block_table.shape", table.shape, f"expected ({num_reqs}, max_blocks)")
    need = needed_blocks(batch, cfg)
    if (need > table.shape[1]).any():
        r = _first_bad(need > table.shape[1])
        _fail(
            f"block_table[{r}]",
            f"{table.shape[1]} blocks",
            f"drafts up to position {int(need[r]) * cfg.block_size - 1} need {int(need[r])}",
        )
    covered = np.arange(table.shape[1])[None, :] < need[:, None]
    missing = covered & (table < 0)
    if missing.any():
        r, b = np.argwhere(missing)[0]
        _fail(f"block_table[{r}][{b}]", int(table[r, b]), "unallocated block inside the range the drafts use")


def validate_sampled(sampled: SampledTokens, batch: VerifiedBatch, cfg: ProposerConfig) -> None:
    """Raise ``ValueError`` if ``sampled`` does not fit ``batch``.

    Only host data is read: the ids of a padded device tensor are not checked
    (that would sync); out-of-range ids there count as placeholders, by the
    padded path's definition of a valid token.
    """
    num_reqs = batch.num_reqs
    if np.asarray(sampled.discarded).shape != (num_reqs,):
        _fail("discarded.shape", np.asarray(sampled.discarded).shape, f"expected ({num_reqs},)")
    backup = np.asarray(sampled.backup)
    if backup.shape != (num_reqs,):
        _fail("backup.shape", backup.shape, f"expected ({num_reqs},)")
    discarded = np.asarray(sampled.discarded, dtype=bool)
    if sampled.lists is not None and len(sampled.lists) == num_reqs:
        may_need = discarded | np.array([len(ids) == 0 for ids in sampled.lists], dtype=bool)
    else:  # padded: any row may hold only placeholders, and the host cannot look
        may_need = np.ones(num_reqs, dtype=bool)
    none_needed = (backup == NO_BACKUP) & may_need
    if none_needed.any():
        r = _first_bad(none_needed)
        why = "discarded" if discarded[r] else ("padded" if sampled.lists is None else "empty list")
        _fail(
            f"backup[{r}]",
            NO_BACKUP,
            f"no backup, but request {r} may continue from it ({why}): pass its token at seq_len",
        )
    bad = ((backup < 0) | (backup >= cfg.vocab_size)) & (backup != NO_BACKUP)
    if bad.any():
        r = _first_bad(bad)
        _fail(f"backup[{r}]", int(backup[r]), f"not a token id in [0, {cfg.vocab_size}), nor NO_BACKUP (-1)")
    bad = discarded & (batch.num_draft_tokens_cpu > 0)
    if bad.any():
        r = _first_bad(bad)
        _fail(f"discarded[{r}]", True, "only a partial prefill (no drafts verified) discards its sampled token")
    if (sampled.padded is None) == (sampled.lists is None):
        _fail("sampled", "padded and lists", "exactly one of the two forms must be given")
    if sampled.padded is not None:
        shape = tuple(sampled.padded.shape)
        if shape != (num_reqs, cfg.num_spec_tokens + 1):
            _fail(
                "sampled_token_ids.shape",
                shape,
                f"expected ({num_reqs}, {cfg.num_spec_tokens + 1}) for K={cfg.num_spec_tokens}",
            )
        return
    lists = sampled.lists
    if len(lists) != num_reqs:
        _fail("len(sampled_token_ids)", len(lists), f"expected {num_reqs}")
    drafts = batch.num_draft_tokens_cpu
    for r, ids in enumerate(lists):
        if len(ids) > drafts[r] + 1:
            _fail(f"sampled_token_ids[{r}]", list(ids), f"more than num_draft_tokens + 1 = {int(drafts[r]) + 1} tokens")
        if drafts[r] > 0 and len(ids) == 0:
            _fail(
                f"sampled_token_ids[{r}]", [], f"a request verifying {int(drafts[r])} drafts samples at least one token"
            )
        for i, tok in enumerate(ids):
            if not 0 <= tok < cfg.vocab_size:
                _fail(f"sampled_token_ids[{r}][{i}]", int(tok), f"not a token id in [0, {cfg.vocab_size})")
