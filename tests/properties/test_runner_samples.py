"""The model runner's own sampling on whole serving runs equals the from-scratch reference.

Where the runner samples (``Scenario.runner_samples``), the drafter is not handed tokens the harness
made: the target's logits, as each step's verification decides them, go through the runner's sampling
half of its iteration (its spec-decode metadata, its rejection sampler, the bookkeeping of its input
batch) and the drafter is handed what that sampled, as the runner hands it, padded or as lists. Every
call's drafts and metadata are compared as before, and what the runner sampled and holds besides
(``sim.oracle.runner_samples``); under asynchronous scheduling too, where the runner's output reaches
the host on a side stream and what it hands its next step is compared as well. Under every
implementation whose runner samples (the ``uses`` mark: vllm-ascend's), for each drafting method it
has, in each mode.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given

from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import check_implementation
from tests.checks.example_budget import share
from tests.checks.modes import MODES, USES_ASYNC_SCHEDULING, USES_EAGLE, USES_EAGLE3, USES_RUNNER_SAMPLES, USES_UNPADDED
from tests.properties.test_propose_loop import TYPICAL
from tests.strategies.scenarios import scenarios

pytestmark = [pytest.mark.order(2), USES_RUNNER_SAMPLES]  # whole serving runs, after the single-call properties

DRAWN = share(12 * len(MODES), at_least=3)
SAMPLING = dataclasses.replace(TYPICAL, runner_samples=True)  # a chunked prompt among decodes: a discarded sample
SCHEDULING = [  # asynchronous scheduling needs the padded drafter (vLLM refuses it unpadded)
    pytest.param(True, False, id="padded"),
    pytest.param(False, False, id="unpadded", marks=USES_UNPADDED),
    pytest.param(True, True, id="async", marks=USES_ASYNC_SCHEDULING),
]
METHODS = [
    pytest.param("mtp"),
    pytest.param("eagle", marks=USES_EAGLE),
    pytest.param("eagle3", marks=USES_EAGLE3),
]


@pytest.mark.order(0)  # one fixed serving run per mode, path and method: beside the other fixed runs
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("padded", "asynchronous"), SCHEDULING)
@pytest.mark.parametrize("mode", MODES)
def test_a_case_every_broken_variant_fails_matches_reference(device, impl, mode, padded, asynchronous, method):
    """``TYPICAL`` with the runner sampling, run early so that a broken spec-decode metadata or
    bookkeeping fails within seconds."""
    scenario = dataclasses.replace(
        SAMPLING, graph_mode=mode, padded=padded, async_scheduling=asynchronous, method=method
    )
    check_implementation(impl, scenario, device, f"typical-runner-samples-{mode}-{method}")


# One draft, one request decoding after a one-token prompt: in full graphs the runner copies the replayed
# graph's drafts to the host straight from its output (drawn on main with 4x the examples; the fake graph
# then ran the replay on the update stream, and the copy stream's wait for the launching stream was a
# StreamOrderError: a correct runner failed).
ONE_DRAFT_REPLAYED = Scenario(
    num_spec_tokens=1,
    block_size=1,
    max_model_len=12,
    token_budget=2,
    max_num_reqs=1,
    vocab_size=32,
    hidden_size=32,
    requests=(RequestSpec(0, 1, 2),),
)


@pytest.mark.parametrize(("padded", "asynchronous"), SCHEDULING)
@pytest.mark.parametrize("mode", MODES)
@DRAWN
@given(scenario=scenarios())
@example(scenario=ONE_DRAFT_REPLAYED)
def test_runner_samples_match_reference(device, impl, mode, padded, asynchronous, scenario, request):
    """Drafts (margin-aware), every call's metadata, and what the runner sampled and holds."""
    scenario = dataclasses.replace(
        scenario, padded=padded, graph_mode=mode, runner_samples=True, async_scheduling=asynchronous
    )
    check_implementation(impl, scenario, device, request.node.name)
