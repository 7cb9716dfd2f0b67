"""The gate catches a broken sampling half of vllm-ascend's runner iteration.

Where the runner samples (``Scenario.runner_samples``, ``sim.impls.vllm_ascend.iteration``), its own
``_calc_spec_decode_metadata`` and ``_bookkeeping_sync`` decide what its rejection sampler reads and
what it books, so a bonus row one early, a discarded chunk's sample booked, or a token booked but not
counted fail the fixed serving run by name (``sampling_breaks``, also ``broken_gate.VARIANTS`` for the
whole gate), and the same metadata built request by request passes.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.checks.e2e_checks import check_implementation
from tests.checks.modes import USES_ASYNC_SCHEDULING
from tests.impls.vllm_ascend import broken_gate
from tests.properties.test_runner_samples import SAMPLING

PATHS = ["padded", "unpadded"]
SCHEDULING = [*PATHS, pytest.param("async", marks=USES_ASYNC_SCHEDULING)]  # async: padded, scheduled asynchronously


def _scenario(path: str):
    """``SAMPLING`` on ``path``: ``padded``, ``unpadded``, or ``async`` (padded, scheduled asynchronously)."""
    return dataclasses.replace(SAMPLING, padded=path != "unpadded", async_scheduling=path == "async")


def _fails(impl, device, path: str, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        check_implementation(impl, _scenario(path), device, "broken-runner-samples")


@pytest.mark.parametrize("path", PATHS)
def test_a_bonus_row_one_early_fails_by_name(monkeypatch, device, impl, path):
    """The rejection sampler reads the bonus token of a request that kept every draft at its last draft's
    row: the runner's valid sampled tokens are named first, before the drafts they change."""
    broken_gate.apply("runner-bonus-of-the-last-draft", monkeypatch)
    _fails(impl, device, path, r"^\d+ mismatches:\n  iteration \d+, request \d: the runner's valid sampled tokens")


@pytest.mark.parametrize("path", SCHEDULING)
def test_a_discarded_sample_booked_fails_by_name(monkeypatch, device, impl, path):
    """A chunked prompt's throwaway sample reported and booked: named where the chunk is (under
    asynchronous scheduling, once the runner's output reaches the host)."""
    broken_gate.apply("runner-discarded-samples-booked", monkeypatch)
    _fails(impl, device, path, r"request \d: the runner's valid sampled tokens: got \[\d+\], want \[\]")


def test_a_token_booked_but_not_counted_fails_by_name(monkeypatch, device, impl):
    """The drafts of the step are the same (the drafter reads no count it books); what the runner holds is
    a token short."""
    broken_gate.apply("runner-books-a-token-short", monkeypatch)
    _fails(
        impl, device, "padded", r"^1 mismatches:\n  iteration 0, request 0: the tokens the runner's input batch holds"
    )


@USES_ASYNC_SCHEDULING
def test_an_asynchronous_output_read_before_its_copy_lands_fails_by_name(monkeypatch, device, impl):
    """The runner's wrapper leaves the event classes placeholders: under asynchronous scheduling its
    output waits for nothing before it reads the sampled tokens its side stream copies to the host."""
    broken_gate.apply("runner-async-output-events-left-placeholders", monkeypatch)
    check_implementation(impl, _scenario("padded"), device, "events-left-placeholders-synchronously")
    _fails(impl, device, "async", r"the runner's valid sampled tokens: got \[-(2147483648|9223372036854775808)\], want")


@pytest.mark.parametrize("path", SCHEDULING)
@pytest.mark.parametrize("variant", ["accepts-every-random-draft", "bonus-after-a-rejection"])
def test_a_broken_random_rejection_fails_in_the_loop(monkeypatch, device, impl, path, variant):
    """Every other request samples at temperature 1 (``iteration.RANDOM``: the odd ones): a rejection
    sampler whose random path keeps a draft the target rejects, or adds the bonus token after a recovered
    one, changes what the runner reports for such a request, named at the first step it happens."""
    broken_gate.apply(variant, monkeypatch)
    _fails(
        impl, device, path, r"request \d*[13579]: the runner's valid sampled tokens: got \[[\d, ]+\], want \[[\d, ]+\]"
    )


@pytest.mark.parametrize("path", SCHEDULING)
def test_spec_metadata_built_request_by_request_passes(monkeypatch, device, impl, path):
    """The control: the same indices by a loop over the requests (the variant's check is of the break)."""
    broken_gate.apply("runner-spec-metadata-by-request", monkeypatch)
    check_implementation(impl, _scenario(path), device, "runner-spec-metadata-by-request")
