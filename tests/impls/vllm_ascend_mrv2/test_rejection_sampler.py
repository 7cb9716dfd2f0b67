"""vllm-ascend's MRV2 rejection sampler (``sim.impls.vllm_ascend_mrv2.rejection``) against the reference
every sampler is held to (``tests.checks.rejection_checks``): greedy rows exactly, random rows well
formed and distributed as the standard rule gives them, no kernel access outside its arguments.

0.23.0's never rejects a random draft (``random-drafts-always-accepted``): there random rows are held
to the defect's model exactly (all drafts, then the bonus token) and the law's test pins it, so the
day a checkout draws its uniforms the session says it is fixed. On main the law must hold."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

from sim.impls.vllm_ascend_mrv2 import importing, rejection
from tests.checks.known_defects import pin
from tests.checks.rejection_checks import DRAFTERS, FIXED, check_first_ids, check_rows
from tests.impls.vllm_ascend_mrv2 import rejection_breaks
from tests.strategies.rejection import verifications

CPU = torch.device("cpu")
DEFECT = "random-drafts-always-accepted"
REQUESTS = 200  # the law's sample: MRV2's kernels run one program per request, interpreted


@pytest.fixture(scope="module")
def always_accepts(impl) -> bool:
    return DEFECT in {d.id for d in impl.divergences}  # the generation installed has it


@pytest.mark.order(0)
@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_batches_match_the_reference(name, always_accepts):
    check_rows(FIXED[name], rejection.sample(FIXED[name], CPU).rows, always_accepts)


def test_temperatures_read_at_batch_rows_fail_the_mixed_batch(monkeypatch, always_accepts):
    """A request's temperature sits in its request-state row (``rejection`` lays the batch out as a runner's states,
    not in batch order): a kernel reading it at the batch row samples ``mixed``'s greedy request at the random one's
    temperature."""
    importing.prepare()
    rejection_breaks.temperatures_of_the_batch_rows(monkeypatch)
    v = FIXED["mixed"]
    with pytest.raises(AssertionError, match=r"request 0 of 2 .*temperature 0\.0\): got"):
        check_rows(v, rejection.sample(v, CPU).rows, always_accepts)


@given(v=verifications(greedy=None, max_reqs=10))
def test_greedy_rows_exact_and_random_rows_as_modelled(v, always_accepts):
    check_rows(v, rejection.sample(v, CPU).rows, always_accepts)


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_random_first_ids_follow_the_target_distribution(drafter, always_accepts):
    sampled = []

    def sample(v):
        sampled.append((v, rejection.sample(v, CPU)))
        return sampled[-1][1]

    try:
        check_first_ids(sample, drafter, n=REQUESTS)
        law = None
    except AssertionError as failure:
        law = failure
    if not always_accepts:
        assert law is None, law
        return
    v, got = sampled[0]
    every_kept = all(row[: len(d) + 1] == [*d, b] for row, d, b in zip(got.rows, v.drafts, v.bonus))
    pin(DEFECT, every_kept and law is not None, law is None, law)
