"""What the adapters' differential suites (tests/impls/NAME) share.

They skip, with the reason, wherever that implementation cannot be imported (its tox env passes
``--impl NAME``, so there the session stops with the cause instead). ``STALE_ROW_RUN`` reads a
row the upstream code reads before writing it, which pins ``sim.impls.fresh_start``; the
later-steps break shows drafts 2..K compared under a modelled defect.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings

from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import check_implementation
from tests.strategies.scenarios import scenarios


def skip_unless_importable(items, folder: Path, unavailable_reason, label: str) -> None:
    """Mark every collected test under ``folder`` skipped with ``unavailable_reason()``, if it names one."""
    mine = [item for item in items if folder in Path(str(item.path)).parents]
    if not mine:
        return
    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"{label} unavailable: {reason}"))


# One request, one draft, padded, vocabulary 32: its batches end on a rejected token's row.
STALE_ROW_RUN = Scenario(
    seed=10,
    num_spec_tokens=1,
    block_size=1,
    max_model_len=32,
    token_budget=2,
    max_num_reqs=1,
    padded=True,
    accept="greedy",
    vocab_size=32,
    max_iterations=24,
    requests=(RequestSpec(0, 1, 2),),
)


def after_a_larger_vocabulary(proposer) -> None:
    """Leave ``proposer``'s input ids past ``STALE_ROW_RUN``'s vocabulary, as a run with 96 ids may."""
    proposer.input_ids.fill_(90)


def later_steps_fed_rolled_hidden_rows(forward):
    """A draft model's ``forward`` whose steps 2..K are handed each request's hidden state one
    request off (rows rolled by one): only drafts 2..K change; no metadata does."""

    @functools.wraps(forward)
    def broken(self, input_ids, positions, hidden_states=None, *args, **kwargs):
        if self.calls >= 1 and hidden_states is not None:  # a later step: the first pass is call 0
            hidden_states = torch.roll(hidden_states, 1, dims=0)
        return forward(self, input_ids, positions, hidden_states, *args, **kwargs)

    return broken


def assert_serving_runs_fail_on_a_later_draft(impl, device, name: str, padded: bool | None = None) -> None:
    """Some serving run of ``impl`` (under its rules) differs from the reference at a draft >= 2."""

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize, max_examples=60)
    @given(scenario=scenarios(padded=padded, max_iterations=10))
    def gate(scenario):
        check_implementation(impl, scenario, device, name)

    with pytest.raises(AssertionError, match=r"draft [2-9]"):
        gate()


def assert_every_host_read_made(ops, host_reads) -> None:
    """Each named host read (``sim.impls.host_reads``) is one the padded path really makes, on the code
    under test: a read renamed or moved upstream is a stale entry, not a silent exemption."""
    from devices.sync_watch import watch_host_syncs
    from sim.oracle.cases import to_batch
    from tests.impls.vllm.test_step_one import _one_decode

    case = _one_decode(16, [3, -1])
    batch, sampled = to_batch(case, torch.device("cpu"), padded=True)
    with watch_host_syncs() as log:
        ops.prepare_call(case.config, batch, sampled)
    made = [(op, log.frames[site]) for op, site in log.counts]
    assert [read for read in host_reads if not any(read.matches(op, frame) for op, frame in made)] == []
