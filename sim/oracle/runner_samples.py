"""What a model runner samples for a verified batch and keeps of it, and the reference for it.

Under ``Scenario.runner_samples`` the runner turns the target's logits into the tokens the drafter is
handed (its rejection sampler) and books them (its input batch). A wrong logits row, bonus index or
discard, or a booked token in the wrong place, hands the drafter and every later step another token:
the acceptance falls and nothing crashes. ``RunnerSampled`` is what an implementation reports, per
request of the call's batch in batch order; ``compare`` checks it against the verification the call
stands for (``sim.oracle.cases.valid_ids``): each request's valid sampled tokens, none for a chunk whose
sample is discarded, and the tokens the runner holds for the request from its first scheduled position:
its scheduled rows that are not drafts, then those valid tokens (a discarded chunk: its rows and its
own token past them, as they were, nothing added); under asynchronous scheduling one placeholder in
their place where the runner books them so before they reach the host (vLLM's V1 runner; an MRV2 runner books the
tokens on the device).
"""

from __future__ import annotations

from typing import NamedTuple

from sim.oracle.cases import BatchCase, RequestCase, valid_ids
from sim.oracle.compare import Mismatch
from sim.oracle.rejection import PLACEHOLDER


class RunnerSampled(NamedTuple):
    """valid: each request's valid sampled tokens as the runner reports them to its scheduler.
    held: the request's tokens from its first scheduled position on, as the runner's input batch holds
    them after the step."""

    valid: list[list[int]]
    held: list[list[int]]


def expected(case: BatchCase, placeholders: bool = False) -> RunnerSampled:
    """``placeholders``: the runner books one placeholder per request that sampled (a V1 runner under asynchronous
    scheduling: its tokens are not on the host yet; the next step's input preparation puts them in), and reports
    the tokens once its asynchronous output's copy lands."""
    vocab = case.config.vocab_size
    valid = [valid_ids(req, vocab) for req in case.requests]
    booked = [[PLACEHOLDER] if v else [] for v in valid] if placeholders else valid
    return RunnerSampled(valid, [_held(req, b) for req, b in zip(case.requests, booked, strict=True)])


def _held(req: RequestCase, booked: list[int]) -> list[int]:
    if req.discarded:
        return list(req.tokens)
    return list(req.tokens[: req.query_len - req.num_drafts]) + booked


WHAT = {
    "valid": "the runner's valid sampled tokens",
    "held": "the tokens the runner's input batch holds from the first scheduled position",
}


def compare(it: int, case: BatchCase, got: RunnerSampled, placeholders: bool = False) -> list[Mismatch]:
    """The first request where each of ``got``'s fields differs from the reference's."""
    want = expected(case, placeholders)
    out = []
    for field in RunnerSampled._fields:
        g, w = getattr(got, field), getattr(want, field)
        if len(g) != len(w):
            out.append(Mismatch(it, None, f"{WHAT[field]}: requests", len(g), len(w)))
            continue
        row = next((r for r, (a, b) in enumerate(zip(g, w)) if list(a) != list(b)), None)
        if row is not None:
            out.append(Mismatch(it, row, WHAT[field], list(g[row]), list(w[row])))
    return out
