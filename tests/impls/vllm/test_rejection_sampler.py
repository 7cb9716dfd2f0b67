"""vLLM's rejection sampler (``sim.impls.vllm.rejection``) against the same reference as
vllm-ascend's (``tests.checks.rejection_checks``): greedy rows exactly, random rows well formed and
distributed as the standard rule gives them, no kernel access outside its arguments. A second sampler,
written independently of vllm-ascend's, that the reference must pass."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from sim.impls.vllm import rejection
from tests.checks.rejection_checks import DRAFTERS, FIXED, check_first_ids, check_rows
from tests.strategies.rejection import verifications

CPU = torch.device("cpu")


@pytest.mark.order(0)
@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_batches_match_the_reference(name):
    torch.manual_seed(0)
    check_rows(FIXED[name], rejection.sample(FIXED[name], CPU).rows)


@settings(max_examples=10)  # vLLM's sampler checks the reference here, not the other way round: a few batches
@given(v=verifications(greedy=None))
def test_greedy_rows_exact_and_random_rows_well_formed(v):
    check_rows(v, rejection.sample(v, CPU).rows)


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_random_first_ids_follow_the_target_distribution(drafter):
    check_first_ids(lambda v: rejection.sample(v, CPU), drafter)
