"""What every rejection sampler under test is held to (``sim.oracle.rejection``), for each
implementation's ``test_rejection_sampler.py``: ``sample(v) -> Sampled`` is the implementation's.

- ``check_rows``: greedy requests get exactly the reference's rows; random ones rows a rejection
  sampler can give.
- ``check_first_ids``: over ``N`` one-draft random requests with a fixed seed, the first output id is
  distributed as the target's distribution (chi-square, ``first_ids_problem``) and the first draft kept
  with the standard rule's probability, for a point-mass drafter (MTP) and one with probabilities.
- ``FIXED``: batches for the front of the session's order, where every break of
  ``tests/impls/*/rejection_breaks.py`` fails in about a second.
"""

from __future__ import annotations

import torch

from sim.oracle.rejection import PLACEHOLDER, Verification, greedy_rows, kept_probability, row_is_well_formed
from tests.strategies.rejection import VOCAB

N = 300  # requests of one draft each (the default): the first id's frequencies, with a fixed seed
CHI2_LIMIT = 24.3  # chi-square, 7 degrees of freedom, p = 0.001
DRAFTERS = ("point-mass", "with-probs")


def check_rows(v: Verification, rows: list[list[int]], random_keeps_every_draft: bool = False) -> None:
    """``random_keeps_every_draft``: a known defect's model (vllm-ascend 0.23.0's MRV2 sampler): every
    random request keeps all its drafts and then the bonus token, exactly."""
    want = greedy_rows(v)
    for r, temperature in enumerate(v.temperature):
        context = f"request {r} of {v.num_reqs} (drafts {list(v.drafts[r])}, temperature {temperature})"
        if temperature == 0:
            assert rows[r] == want[r], f"{context}: got {rows[r]}, want {want[r]}"
        elif random_keeps_every_draft:
            kept = [*v.drafts[r], v.bonus[r]]
            kept += [PLACEHOLDER] * (v.max_spec_len + 1 - len(kept))
            assert rows[r] == kept, f"{context}: got {rows[r]}, the defect's model {kept}"
        else:
            problem = row_is_well_formed(rows[r], v.drafts[r], point_mass=v.draft_probs is None)
            assert problem is None, f"{context}: {problem}"


def _strong(rows: list[tuple[int, bool]]) -> torch.Tensor:
    """Target logits, one row per draft: (token, favoured) -> that token's logit far above (True) or
    below (False) the rest, so a greedy row and a random draft's fate are as good as certain; the rest
    distinct, so that no argmax is a tie."""
    logits = torch.arange(VOCAB, dtype=torch.float32).repeat(len(rows), 1) / 10
    for i, (token, favoured) in enumerate(rows):
        logits[i, token] = 12.0 if favoured else -12.0
    return logits


# A mixed batch whose random request rejects its draft, and nine greedy requests, so that
# vllm-ascend's kernels put two requests in each program (eight vector cores here).
FIXED = {
    "mixed": Verification(((1, 2), (3,)), _strong([(1, True), (5, True), (3, False)]), (4, 6), (0.0, 1.0), 2),
    "nine-greedy": Verification(
        tuple((r % VOCAB, (r + 1) % VOCAB) for r in range(9)),
        _strong([(t, r % 3 != 0) for r in range(9) for t in (r % VOCAB, (r + 1) % VOCAB)]),
        tuple((r + 3) % VOCAB for r in range(9)),
        (0.0,) * 9,
        2,
    ),
}


def first_ids_problem(rows: list[list[int]], q: torch.Tensor) -> str | None:
    """Why the rows' first output ids are not draws of ``q`` (a distribution over the vocabulary with its
    mass on 8 ids: chi-square at p = 0.001 over them; an id it gives no mass, or a placeholder, outright),
    or None."""
    support = q.nonzero().flatten()
    first = torch.tensor([row[0] for row in rows])
    outside = sorted(set(first.tolist()) - set(support.tolist()))
    if outside:
        return f"first ids {outside} where the target puts no mass (its ids: {support.tolist()})"
    counts = torch.bincount(first, minlength=q.numel()).double()[support]
    expected = len(rows) * q[support].double()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    if chi2 < CHI2_LIMIT:
        return None
    return f"first ids {dict(zip(support.tolist(), counts.tolist()))} against n*q {expected.tolist()}: chi2 {chi2:.1f}"


def check_first_ids(sample, drafter: str, seed: int = 7, n: int = N) -> None:
    """The standard rule's guarantee, whatever the drafter: the first output id ~ q, and the first
    draft kept with probability sum_x min(p(x), q(x)) (a point mass: q(draft)); over ``n`` requests."""
    q_logits = torch.tensor([2.0, 0.5, 1.0, 1.5, -1.0, 0.0, 0.8, -0.5])
    q = q_logits.softmax(-1)
    p = None if drafter == "point-mass" else torch.tensor([0.05, 0.3, 0.1, 0.25, 0.05, 0.1, 0.1, 0.05])
    gen = torch.Generator().manual_seed(seed)
    drafts = torch.full((n,), 3) if p is None else torch.multinomial(p, n, replacement=True, generator=gen)
    v = Verification(
        tuple((int(d),) for d in drafts),
        q_logits.expand(n, VOCAB).contiguous(),
        tuple(torch.randint(0, VOCAB, (n,), generator=gen).tolist()),
        (1.0,) * n,
        1,
        None if p is None else p.expand(n, VOCAB).contiguous(),
    )
    torch.manual_seed(seed + 1)  # the sampler's own draws, independent of the drafts' (the same seed would tie them)
    rows = torch.tensor(sample(v).rows)
    problem = first_ids_problem(rows.tolist(), q)
    assert problem is None, problem
    kept = (rows[:, 1] != PLACEHOLDER).double().mean().item()  # a kept draft is followed by the bonus
    want = kept_probability(p, q, 3)  # the point mass is at 3
    bound = 4 * (want * (1 - want) / n) ** 0.5
    assert abs(kept - want) < bound, f"first drafts kept {kept:.3f}, want {want:.3f} (+- {bound:.3f})"
