"""What a rejection sampler must output, from scratch: the verification step that decides how many
drafts each request keeps, and so what the drafter is handed next.

Per request r with drafts ``d_1..d_k`` and the target's distributions ``q_1..q_{k+1}`` at those
positions (``q_{k+1}``: the bonus position), the output row is ``max_spec_len + 1`` ids:

- greedy (temperature 0): the target's argmax at each position up to and including the first
  position where it differs from the draft; if none differs, all ``k`` and then the bonus token.
  That is ``greedy_rows``, exact.
- random: each draft is kept with probability ``min(1, q_i(d_i) / p_i(d_i))`` (``p``: the drafter's
  distribution; a drafter that gives none, as MTP and n-gram drafting, is a point mass at
  ``d_i``); the first one rejected is replaced by a draw from ``max(q_i - p_i, 0)``, normalized,
  and the row ends there. So the first output id of a request is distributed as ``q_1`` whatever
  the drafter, and the first draft is kept with probability ``sum_x min(p_1(x), q_1(x))``
  (``kept_probability``), both checked by their distribution.

Ids past a row's end are ``PLACEHOLDER`` (vLLM's ``PLACEHOLDER_TOKEN_ID``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PLACEHOLDER = -1


@dataclass(frozen=True)
class Verification:
    """One verification batch: request r drafted ``drafts[r]`` (possibly none), the target scored
    ``len(drafts[r])`` positions (``target_logits`` rows, flattened over requests) and sampled
    ``bonus[r]`` past them; ``temperature[r]`` 0 is greedy; ``top_k[r]`` its top-k (None: no request
    sets one; a request without one holds the vocabulary size, as vLLM's input batch does). ``draft_probs``: the drafter's
    distributions per draft (None: MTP's, a point mass at each draft). ``max_spec_len``: the
    output rows' width less one."""

    drafts: tuple[tuple[int, ...], ...]
    target_logits: torch.Tensor
    bonus: tuple[int, ...]
    temperature: tuple[float, ...]
    max_spec_len: int
    draft_probs: torch.Tensor | None = None
    top_k: tuple[int, ...] | None = None

    @property
    def num_reqs(self) -> int:
        return len(self.drafts)

    def per_request(self, flat: list) -> list[list]:
        """A list over the flattened drafts, split per request."""
        out, start = [], 0
        for d in self.drafts:
            out.append(flat[start : start + len(d)])
            start += len(d)
        return out

    def __repr__(self) -> str:  # what a failing example prints: enough to rebuild it
        return (
            f"Verification(drafts={self.drafts}, target_logits=torch.tensor({self.target_logits.tolist()}), "
            f"bonus={self.bonus}, temperature={self.temperature}, max_spec_len={self.max_spec_len}, "
            f"draft_probs={None if self.draft_probs is None else self.draft_probs.tolist()}, top_k={self.top_k})"
        )


def greedy_rows(v: Verification) -> list[list[int]]:
    """The output rows of every request of ``v`` as if it were greedy."""
    rows = []
    for draft, argmax, extra in zip(v.drafts, v.per_request(v.target_logits.argmax(-1).tolist()), v.bonus, strict=True):
        row: list[int] = []
        for d, t in zip(draft, argmax, strict=True):
            row.append(t)
            if d != t:
                break
        else:
            row.append(extra)
        rows.append(row + [PLACEHOLDER] * (v.max_spec_len + 1 - len(row)))
    return rows


def row_is_well_formed(row: list[int], drafts: tuple[int, ...], point_mass: bool = True) -> str | None:
    """Why a random request's output row cannot be a rejection sampler's, or None: its kept ids are
    a prefix of the drafts followed by one more id (a recovered or the bonus token), then
    placeholders only. With a point-mass drafter (``point_mass``: no draft probabilities) the id
    that replaces a rejected draft is never that draft: it is drawn from ``max(q - p, 0)``, which is
    0 there."""
    n = next((i for i, t in enumerate(row) if t == PLACEHOLDER), len(row))
    if any(t != PLACEHOLDER for t in row[n:]):
        return f"ids after a placeholder: {row}"
    if not 1 <= n <= len(drafts) + 1:
        return f"{n} ids for {len(drafts)} drafts: {row}"
    if tuple(row[: n - 1]) != drafts[: n - 1]:
        return f"kept ids {row[: n - 1]} are not the drafts' prefix {list(drafts[: n - 1])}"
    if point_mass and n <= len(drafts) and row[n - 1] == drafts[n - 1]:
        return f"draft {n} ({drafts[n - 1]}) replaced by itself, which a point-mass drafter's rule never draws: {row}"
    return None


def kept_probability(p: torch.Tensor | None, q: torch.Tensor, draft: int) -> float:
    """The probability a request's first draft is kept: for a draft drawn from ``p``,
    ``sum_x min(p(x), q(x))``; for a point mass at ``draft`` (``p`` None), ``q(draft)``. Whichever,
    the first output id is distributed as ``q``."""
    return float(q[draft]) if p is None else float(torch.minimum(p, q).sum())
