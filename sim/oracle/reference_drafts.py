"""Draft tokens from scratch: one request, dense causal attention, no paging.

docs/DESIGN.md "MTP semantics": position i of the MTP layer takes
``(embed(t[i+1]), h[i])``; the output at the last accepted position L-1
gives draft 1; step j feeds (draft j-1, the previous step's output) at
position L-2+j and attends to every earlier position.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from sim.models.tiny import TinyMtp


class RefDraft(NamedTuple):
    """The reference's top two tokens at one draft position, and their logit margin."""

    top1: int
    top2: int
    margin: float


def dense_attention(q, k, v, q_pos, scale, recency):
    """[n, h, d] queries at positions q_pos over keys at positions 0..len(k)-1."""
    key_pos = torch.arange(k.shape[0])
    scores = torch.einsum("nhd,mhd->nhm", q, k) * scale
    scores = scores - recency[None, :, None] * (q_pos[:, None] - key_pos[None, :]).to(scores.dtype)[:, None, :]
    scores = scores.masked_fill((key_pos[None, :] > q_pos[:, None])[:, None, :], float("-inf"))
    return torch.einsum("nhm,mhd->nhd", torch.softmax(scores, dim=-1), v)


class ReportedIds:
    """``model`` whose logits are over the ids an implementation's sampling reports (``Rules.sample_report``):
    the logit of each reported id is the largest of the ids reported as it, so the argmax is the id
    reported for the model's own argmax; ids nothing is reported as hold -inf."""

    def __init__(self, model, report: tuple[int, ...]):
        self.model, self.report = model, torch.tensor(report, dtype=torch.int64)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return reported_logits(self.model.compute_logits(hidden_states), self.report)


def reported_logits(logits: torch.Tensor, report) -> torch.Tensor:
    """``logits`` over the ids a sampler reports (``report[id]``, as ``ReportedIds``; -1: an id it never
    reports, which never wins): the argmax of the result is the id reported for the argmax of ``logits``
    over the ids it reports."""
    index = torch.as_tensor(report, dtype=torch.int64, device=logits.device).expand_as(logits)
    logits = logits.masked_fill(index < 0, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter_reduce(-1, index.clamp(min=0), logits, reduce="amax")


def _top2(logits: torch.Tensor) -> RefDraft:
    vals, ids = logits.topk(2)
    return RefDraft(int(ids[0]), int(ids[1]), float(vals[0] - vals[1]))


@torch.no_grad()
def reference_drafts(
    model: TinyMtp,
    history: list[int],
    target_hidden: torch.Tensor,
    k: int,
    max_model_len: int,
    mrope: list[list[int]] | None = None,
) -> list[RefDraft]:
    """Drafts 1..k of a request whose accepted tokens are ``history[:-1]``.

    ``history[-1]`` is the token drafting continues from; ``target_hidden``
    holds the target's hidden state at each accepted position (eagle3: its
    auxiliary layers, combined here once, for the accepted positions only).
    ``mrope``: for an M-RoPE model, the (temporal, height, width) rows of
    every position the drafts reach, 3 lists covering positions 0..L+k-2.
    Drafts at positions past ``max_model_len`` are garbage by definition and
    omitted. A draft model (``cfg.draft_model``) reads no hidden state: its rows
    are the tokens themselves, ``history[p]`` at position p, the next token's
    row (position L) gives draft 1, and step j feeds draft j-1 at L - 1 + j.
    """
    if model.cfg.draft_model:
        return _language_model_drafts(model, history, k, max_model_len)
    L = len(history) - 1
    if model.cfg.eagle3:
        target_hidden = model.combine_hidden_states(target_hidden)
    rows = torch.tensor(mrope, dtype=torch.int64) if model.cfg.mrope else None

    def at(positions: torch.Tensor) -> torch.Tensor:
        return positions if rows is None else rows[:, positions]

    pos = torch.arange(L)
    x = model.block_input(torch.tensor(history[1:]), target_hidden)
    q, keys, vals = model.qkv(x, at(pos))
    # every accepted position's KV, the last one's query only: drafting reads nothing else (O(L), so a
    # 64k-token context costs what its cache holds)
    h = model.block_output(x[-1:], dense_attention(q[-1:], keys, vals, pos[-1:], model.scale, model.recency))
    drafts = [_top2(model.compute_logits(h)[0])]
    for j in range(2, k + 1):
        p = L - 2 + j
        if p >= max_model_len:
            break
        x = model.block_input(torch.tensor([drafts[-1].top1]), h)
        q, k1, v1 = model.qkv(x, at(torch.tensor([p])))
        keys, vals = torch.cat([keys, k1]), torch.cat([vals, v1])
        h = model.block_output(x, dense_attention(q, keys, vals, torch.tensor([p]), model.scale, model.recency))
        drafts.append(_top2(model.compute_logits(h)[0]))
    return drafts


def _language_model_drafts(model: TinyMtp, history: list[int], k: int, max_model_len: int) -> list[RefDraft]:
    """``reference_drafts`` of a draft model: plain greedy decoding from ``history``, dense attention."""
    L = len(history) - 1
    drafts: list[RefDraft] = []
    keys = vals = None
    tokens, pos = torch.tensor(history), torch.arange(L + 1)
    for p in range(L, L + k):
        if p >= max_model_len:
            break
        x = model.block_input(tokens, torch.zeros(len(tokens), model.hidden_size))
        q, k1, v1 = model.qkv(x, pos)
        keys = k1 if keys is None else torch.cat([keys, k1])
        vals = v1 if vals is None else torch.cat([vals, v1])
        h = model.block_output(x[-1:], dense_attention(q[-1:], keys, vals, pos[-1:], model.scale, model.recency))
        drafts.append(_top2(model.compute_logits(h)[0]))
        tokens, pos = torch.tensor([drafts[-1].top1]), torch.tensor([p + 1])
    return drafts
