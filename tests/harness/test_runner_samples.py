"""What a model runner samples and keeps (``sim.oracle.runner_samples``), and the scenario field that asks
for it (``Scenario.runner_samples``): the reference on worked cases, the comparison naming the first
request that differs, the serving loop's verification a rejection sampler can give, and what is refused
by name."""

from __future__ import annotations

import dataclasses

import pytest

from devices.sim import SimDevice
from mtp.config import ProposerConfig
from sim.impls import core
from sim.models.tiny import TinyConfig, TinyTarget
from sim.oracle import runner_samples
from sim.oracle.cases import BatchCase, RequestCase
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

CONFIG = ProposerConfig(3, 96, 4, 96, 64, 8)
# a decode that verified 3 drafts and kept the first (sampled: the kept draft, the target's token);
# a partial prefill, its sample discarded; a prefill's last chunk (no drafts, one sample)
DECODE = RequestCase([10, 11, 12, 13, 50], 20, 4, 3, [11, 40, -1, -1], False, [0, 1, 2, 3, 4, 5, 6])
PARTIAL = RequestCase([7, 8, 9], 0, 2, 0, [33, -1, -1, -1], True, [7])
LAST_CHUNK = RequestCase([4, 5, 6], 8, 2, 0, [21, -1, -1, -1], False, [8, 9, 10])
CASE = BatchCase(CONFIG, [DECODE, PARTIAL, LAST_CHUNK], seed=0)


def test_the_reference_on_worked_requests():
    want = runner_samples.expected(CASE)
    assert want.valid == [[11, 40], [], [21]]  # the kept draft and the target's token; discarded; the sample
    # the decode's last token and what it sampled; the chunk as it was; the chunk's rows and its sample
    assert want.held == [[10, 11, 40], [7, 8, 9], [4, 5, 21]]


def test_under_asynchronous_scheduling_the_runner_books_a_placeholder():
    want = runner_samples.expected(CASE, placeholders=True)
    assert want.valid == [[11, 40], [], [21]]  # reported once the output's copy lands
    assert want.held == [[10, -1], [7, 8, 9], [4, 5, -1]]  # one placeholder per request that sampled


def test_the_comparison_names_the_first_request_that_differs():
    want = runner_samples.expected(CASE)
    got = want._replace(valid=[[11, 40], [33], [21]], held=[[10, 11, 40], [7, 8, 9], [4, 5]])
    found = [str(m) for m in runner_samples.compare(2, CASE, got)]
    assert found == [
        "iteration 2, request 1: the runner's valid sampled tokens: got [33], want []",
        "iteration 2, request 2: the tokens the runner's input batch holds from the first scheduled position: "
        "got [4, 5], want [4, 5, 21]",
    ]
    assert runner_samples.compare(2, CASE, want) == []


def _verifications(scenario: Scenario) -> list[RequestCase]:
    """Each call's requests over a serving run whose proposer drafts the target's own next token first
    (then ids the target need not choose)."""
    target = TinyTarget(
        TinyConfig(vocab_size=scenario.vocab_size, hidden_size=scenario.hidden_size, seed=scenario.seed)
    )
    sim, seen = ServingSim(scenario, target), []
    for it in range(scenario.max_iterations):
        if sim.done:
            break
        iteration = sim.step(it)
        if iteration is None:
            continue
        seen += iteration.case.requests
        drafts = [[target.greedy(target.sequence_hidden(h)[-1:]).item(), 1, 2] for h in iteration.histories]
        sim.commit(iteration, drafts)
    return seen


def test_under_runner_samples_the_verification_never_rejects_what_the_target_chooses():
    """``accept="none"`` rejects every draft; a runner that samples keeps a draft the target chooses (a
    rejection sampler gives nothing else), so there the first drafts, which are the target's, are kept."""
    scenario = Scenario(accept="none", requests=(RequestSpec(0, 5, 8), RequestSpec(0, 7, 8)), max_iterations=8)
    plain = [r for r in _verifications(scenario) if r.num_drafts > 0]
    sampling = [r for r in _verifications(dataclasses.replace(scenario, runner_samples=True)) if r.num_drafts > 0]
    assert plain and sampling
    assert all(len([t for t in r.sampled if t >= 0]) == 1 for r in plain)  # nothing kept
    assert all(len([t for t in r.sampled if t >= 0]) >= 2 for r in sampling)  # the first draft kept


def test_the_core_refuses_runner_samples_by_name():
    scenario = Scenario(runner_samples=True, requests=(RequestSpec(0, 5, 4),))
    assert "lacks the model runner's own sampling" in core().refuses(scenario, "sim")
    with pytest.raises(ValueError, match=r"^runner_samples=True: the core is the proposer alone"):
        run_scenario(scenario, SimDevice())


def test_replay_files_without_the_field_load_with_the_samples_handed():
    scenario = Scenario(requests=(RequestSpec(0, 5, 4),))
    data = dataclasses.asdict(scenario)
    del data["runner_samples"]
    loaded = Scenario.from_dict(data | {"requests": [dataclasses.asdict(r) for r in scenario.requests]})
    assert loaded.runner_samples is False


def test_a_run_that_compared_none_of_the_runners_samples_fails(monkeypatch):
    """The end-to-end check fails a run whose runner sampled but whose samples nothing compared (as it
    fails a run that compared no step): a checker that skipped them would otherwise pass it silently."""
    from sim.serving.run import RunReport
    from tests.checks import e2e_checks

    scenario = Scenario(runner_samples=True, requests=(RequestSpec(0, 5, 4),))
    report = RunReport(scenario, iterations=3, steps_compared=9)
    monkeypatch.setattr(e2e_checks, "run_scenario", lambda *args, **kwargs: report)
    with pytest.raises(AssertionError, match=r"^runs: the runner samples, and the run compared none of its samples"):
        e2e_checks.check_scenario(scenario, SimDevice(), "runs")
    report.runner_samples_compared = 3
    assert e2e_checks.check_scenario(scenario, SimDevice(), "runs") is report
