"""The end-to-end check: a scenario's drafts and metadata equal the reference.

On failure the scenario is written to ``failures/NAME.json`` and the message
gives the one command that replays it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from sim.oracle.cases import to_batch
from sim.oracle.greedy_outputs import differences
from sim.serving.run import build_models, run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim

CPU = torch.device("cpu")
FAILURE_DIR = Path("failures")
# What this test's serving runs compared, summed over its examples: the gate's plugin (tests/plugin.py) puts it in
# the test's JUnit properties, sums it over the session for the terminal summary, and resets it.
TALLY: Counter = Counter()


def followed_key(defect: str, what: str) -> str:
    """The tally's name for the calls that followed the spec for ``defect``, or the defect (``what``)."""
    return f"calls following the {what} of {defect}"


def replay_command(path: Path, device, ops=None, impl=None) -> str:
    """The command that replays the scenario saved at ``path`` on ``impl`` (None: the core), with the
    divergence list it was given."""
    cmd = f"python -m sim replay {path} --device {device.name}"
    if impl is not None and impl.name != "core":
        cmd += f" --impl {impl.name}"  # its own ops
        if impl.divergence_list:
            cmd += f" --divergences {impl.divergence_list}"
    elif ops is not None and type(ops).__module__ != "mtp.ops":
        cmd += f" --ops {type(ops).__module__}:{type(ops).__name__}"
    return cmd


def check_scenario(
    scenario, device, name: str, impl=None, *, ops=None, proposer_cls=None, rules=None, replay_args: str = ""
):
    """``scenario`` served by ``impl`` (an ``Implementation``; None: the core) equals the reference under
    its rules, every divergence counted for the values its rule decided (``sim.serving.run.run_scenario``:
    ``ops``, ``proposer_cls`` and ``rules`` replace the implementation's). ``replay_args``: what the replay
    command needs besides the device, ops and impl (``--pcp 1 ...``)."""
    report = run_scenario(scenario, device, impl, ops=ops, proposer_cls=proposer_cls, rules=rules)
    TALLY.update({"drafts compared": report.drafts_compared, "steps compared": report.steps_compared})
    TALLY.update({"near ties": report.drafts_ambiguous, "drafts undefined": report.drafts_undefined})
    TALLY.update({f"values decided by {d}": n for d, n in report.governed.items()})
    TALLY.update({followed_key(d, what): n for (d, what), n in report.followed.items()})
    if scenario.runner_samples:
        TALLY.update({"runner samples compared": report.runner_samples_compared})
    if report.steps_compared == 0:
        raise AssertionError(f"{name}: the run compared nothing ({report.iterations} iterations)")
    if scenario.runner_samples and report.runner_samples_compared == 0:
        raise AssertionError(f"{name}: the runner samples, and the run compared none of its samples")
    if not report.ok:
        path = scenario.save(FAILURE_DIR / f"{name}.json")
        lines = "\n  ".join(str(m) for m in report.mismatches[:6])
        replay = replay_command(path, device, ops, impl) + replay_args
        raise AssertionError(f"{len(report.mismatches)} mismatches:\n  {lines}\nreplay: {replay}")
    return report


def check_implementation(impl, scenario, device, name: str, rules=None):
    """``check_scenario`` on the implementation under test (``rules``: in place of its own)."""
    return check_scenario(scenario, device, name, impl, rules=rules)


def check_greedy_outputs(scenario: Scenario, report) -> None:
    """Under greedy verification, every finished request's tokens are the target's own greedy decoding of
    its prompt (``sim.oracle.greedy_outputs``): spec decoding on and off give the same output."""
    if scenario.accept != "greedy":
        raise ValueError(f"accept={scenario.accept!r}: only greedy verification outputs the target's own tokens")
    assert report.outputs, "no request finished: nothing to compare"
    target = build_models(scenario, CPU, poison_kv=False)[1]
    prompts = {rid: spec.prompt_len for rid, spec in enumerate(scenario.requests)}
    assert not (found := differences(target, report.outputs, prompts)), found[:3]


# Two prompts' first chunks under full graphs, K = 4: the call a dummy run follows (``after_a_call``).
A_CALL = Scenario(num_spec_tokens=4, graph_mode="full", requests=(RequestSpec(0, 6, 4), RequestSpec(0, 3, 4)))


def after_a_call(device, proposer_cls):
    """A full-graph ``proposer_cls``, its graphs captured, after one real call of ``A_CALL``'s first
    iteration: the proposer, and the logits computations that call made."""
    model, target = build_models(A_CALL, device.torch_device)
    sim = ServingSim(A_CALL, target)
    proposer = proposer_cls(sim.config, model, device, mode=A_CALL.graph_mode)
    proposer.capture_all()
    it = sim.step(0)
    batch, sampled = to_batch(it.case, device.torch_device, A_CALL.padded, it.hidden.to(device.torch_device))
    before = proposer.logits_calls
    proposer.propose(batch, sampled)
    return proposer, proposer.logits_calls - before


def check_dummy_run_matches_propose(device, proposer_cls) -> None:
    """A dummy run computes logits (and so, under PCP, runs collectives) as often as a real call.

    Ranks that disagree on that count hang on hardware (bug class 7).
    """
    proposer, real = after_a_call(device, proposer_cls)
    before = proposer.logits_calls
    proposer.dummy_run(2)
    dummy = proposer.logits_calls - before
    assert dummy == real == A_CALL.num_spec_tokens, f"logit computations: dummy run {dummy}, real call {real}"
