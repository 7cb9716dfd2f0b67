"""What a model runner hands its next step under asynchronous scheduling, and the reference for it.

Under asynchronous scheduling the scheduler schedules the next step before this one's verification is
known, counting every draft as accepted, with placeholders for the tokens not known yet. After
drafting, the runner hands the next step the token each request continues from and its drafts, which
replace the placeholders in the next step's input ids, and the number of valid sampled tokens of each
request, copied to the host on a side stream; from those counts the next step corrects the sequence
lengths counted ahead. A wrong token or count, or a count read before its copy lands, shifts every
later token, position and slot of the request: the acceptance falls and nothing crashes
(vllm-ascend#9456, #13864, #10621).

The next step is the oracle's (``next_rows``): the call's requests in reverse order, each a decode of
its drafts, with a new request's prompt (``NEW_PROMPT``) in the middle, so every row moves and one has
no row before it. ``NextStep`` is what an implementation reports, per request of the call's batch in
batch order, and for the new request; ``compare`` checks it against the from-scratch reference:
``reference.next_token`` and the length the request has once its rejected drafts are dropped.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from sim.oracle import reference
from sim.oracle.cases import BatchCase
from sim.oracle.compare import Mismatch

NEW_PROMPT = (5, 7)  # the new request's prompt tokens in the next step


def next_rows(num_reqs: int) -> list[int | None]:
    """The next step's rows: the row of the call's batch each holds, None for the new request."""
    rows: list[int | None] = list(range(num_reqs))[::-1]
    rows.insert(num_reqs // 2, None)
    return rows


class NextStep(NamedTuple):
    """next_tokens: the token each request continues from (the runner's ``prev_sampled_token_ids``).
    valid_counts: its valid sampled tokens, as the host holds them once the copy landed.
    seq_lens: its sequence length as the next step corrects it, less that step's query (the accepted
    length: what the request holds once this step's rejected drafts are dropped).
    input_ids: [B, 1 + K], the next step's input ids of the request, a decode of this call's drafts:
    the token it continues from, then the drafts (no placeholder of the scheduler's left).
    num_computed: its tokens before the next step's query, as the device corrects them (the accepted
    length again, from the device's own copy of the counts).
    num_accepted: its accepted-token count as the next step's state holds it (what a hybrid model's
    recurrent state is restored by): the valid count where it verified drafts, else 1.
    new_request: the new request's next-step row, its input ids then its corrected seq_len, device
    num_computed_tokens and num_accepted_tokens: its prompt, the prompt's length, 0 and 1, nothing of
    another request's.

    A field is None where the implementation's runner hands its next step nothing of the kind (an MRV2 runner
    keeps its counts on the device and no accepted-token state for a model without recurrent layers): it is
    not compared. ``unscheduled``: the requests (rows of the call's batch) whose next step here, a decode of drafts
    after a chunk that did not end its prompt, is no step the implementation's scheduler makes (vLLM before 0.27
    schedules no drafts beside a prompt's tokens): their input ids are not compared."""

    next_tokens: torch.Tensor
    valid_counts: torch.Tensor
    seq_lens: torch.Tensor
    input_ids: torch.Tensor
    num_computed: torch.Tensor
    num_accepted: torch.Tensor
    new_request: torch.Tensor
    unscheduled: tuple[int, ...] = ()


def expected(case: BatchCase, drafts: list[list[int]]) -> NextStep:
    """The reference's ``NextStep`` of ``case``, one request at a time; the next step's input ids hold
    ``drafts``, the call's own (compared with the reference's drafts apart)."""
    vocab = case.config.vocab_size
    tokens, counts, lens, inputs, accepted = [], [], [], [], []
    for req, own in zip(case.requests, drafts, strict=True):
        token, valid = reference.next_token(req, vocab)
        tokens.append(token)
        counts.append(valid)
        lens.append(req.seq_len - reference.rejected(req, valid))
        inputs.append([token, *own])
        accepted.append(valid if req.num_drafts > 0 else 1)
    fields = (tokens, counts, lens, inputs, lens, accepted, [*NEW_PROMPT, len(NEW_PROMPT), 0, 1])
    return NextStep(*(torch.tensor(v, dtype=torch.int64) for v in fields))


WHAT = {
    "next_tokens": "the token handed to the next step",
    "valid_counts": "the valid sampled-token count on the host",
    "seq_lens": "the next step's corrected seq_len (less its query)",
    "input_ids": "the next step's input ids",
    "num_computed": "the next step's num_computed_tokens on the device",
    "num_accepted": "the next step's num_accepted_tokens",
    "new_request": "a new request's next-step row (input ids, seq_len, num_computed, num_accepted)",
}


def compare(it: int, case: BatchCase, got: NextStep, drafts: list[list[int]]) -> list[Mismatch]:
    """The first request where each of ``got``'s fields differs from the reference's (``drafts``: the
    call's), and the new request's row where it differs."""
    want = expected(case, drafts)
    out = []
    for field in NextStep._fields:
        if field == "unscheduled" or getattr(got, field) is None:
            continue
        g, w = getattr(got, field).to(torch.int64).cpu().tolist(), getattr(want, field).tolist()
        if field == "input_ids":
            g = [row for r, row in enumerate(g) if r not in got.unscheduled]
            w = [row for r, row in enumerate(w) if r not in got.unscheduled]
        if field == "new_request":
            if got.num_accepted is None:  # a runner without accepted-token state hands its row without one
                w = w[:-1]
            if g != w:
                out.append(Mismatch(it, None, WHAT[field], g, w))
            continue
        if len(g) != len(w):
            out.append(Mismatch(it, None, f"{WHAT[field]}: rows", len(g), len(w)))
            continue
        row = next((r for r, (a, b) in enumerate(zip(g, w)) if a != b), None)
        if row is not None:
            out.append(Mismatch(it, row, WHAT[field], g[row], w[row]))
    return out
