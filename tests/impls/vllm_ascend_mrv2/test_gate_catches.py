"""The gate catches a regression in the code vllm-ascend's MRV2 speculator runs, with its divergences modelled.

Each case breaks one function (``broken_gate.VARIANTS``: a step's position not advanced, slots one
position back, 0.23.0's host lengths not advanced) and runs the gate's step check under the
generation's rules: it must fail. Without these, a modelled divergence could hide a real regression.
The draft steps labelled ``PrefillNoCache`` (what the step check does not compare: the attention
state) fail a serving run by name, at the forward that reads no cached context; a broken metadata builder
(the checkout's, which the speculator's ``build_attn_metadata`` asks) fails a serving run, and main's
speculator handing an MLA draft's builder the rotary positions of the step before fails its run by name. The
runner's side: request states read at batch rows, and the host lengths it hands on (laid out before their copy
lands, from the wrong row, or from counts copied before the postprocess lowered them), fail serving runs.
"""

from __future__ import annotations

import dataclasses

import pytest

from devices.sim.streams import StreamOrderError
from sim.impls.vllm_ascend_mrv2 import graphs
from tests.checks import core_checks
from tests.checks.e2e_checks import check_implementation
from tests.impls.suites import assert_gate_fails, assert_serving_runs_fail
from tests.impls.vllm_ascend_mrv2 import broken_gate, sampling_breaks
from tests.impls.vllm_ascend_mrv2.cases import OPS, rules
from tests.properties.test_propose_loop import TYPICAL

MATCH = {
    "positions-not-advanced": "positions",
    "slots-one-position-back": "slot",
    "host-seq-lens-not-advanced": "seq_lens",
}


STATES = ("decode-steps-labelled-prefill-no-cache", "draft-steps-labelled-prefill-no-cache")


def _applied(name: str, monkeypatch) -> None:
    if name not in broken_gate.variants():
        where = broken_gate.VARIANTS[name][3] or "any"
        pytest.skip(f"{name} applies to vllm-ascend {where}'s speculator where it has what it changes (broken_gate)")
    broken_gate.apply(name, monkeypatch)


@pytest.mark.parametrize("name", list(MATCH))
def test_a_broken_speculator_fails_the_gate(monkeypatch, device, name):
    _applied(name, monkeypatch)
    assert_gate_fails(OPS.__class__(), core_checks.check_steps, rules(), device, padded=True, match=MATCH[name])


def test_a_broken_builder_fails_a_serving_run(monkeypatch, device, impl):
    """The speculator's metadata is the checkout's builder's: a builder handing each request's query start as
    its end changes what the first pass attends with, and so its drafts."""
    _applied("builder-query-starts-as-ends", monkeypatch)
    assert_serving_runs_fail(impl, device, "builder-query-starts-as-ends", r"mismatch", padded=True)


def test_request_states_read_at_batch_rows_fail_a_serving_run(monkeypatch, device, impl):
    """The runner's request-state rows are not its batch rows (``mrv2_runner.state_rows``): a speculator that reads
    the token each request continues from at its batch row drafts from another request's token."""
    _applied("request-states-of-the-batch-rows", monkeypatch)
    assert_serving_runs_fail(impl, device, "request-states-of-the-batch-rows", r"mismatch", padded=True)


@pytest.mark.parametrize("name", ["host-lengths-read-before-their-event", "host-lengths-of-the-batch-rows"])
def test_host_lengths_handed_wrong_fail_a_serving_run_by_name(monkeypatch, device, impl, name):
    """The host lengths the runner hands its speculator come from its device's counts (``host_lengths``): laid out
    before their copy lands (poison) or from another request's state row, the first pass's (the target's metadata)
    and every draft step's lengths are wrong, named."""
    _applied(name, monkeypatch)
    assert_serving_runs_fail(impl, device, name, r"(first pass|step \d) seq_lens\[0:\].*: got \[", padded=True)


def test_host_counts_copied_before_the_postprocess_fail_the_next_steps_lengths(monkeypatch, device, impl):
    """What the runner hands its next step (``host_lengths.handed_on``, compared at every call): counts copied to the
    host before ``post_update`` lowers them leave the next step's host lengths a request's rejected drafts long."""
    _applied("host-counts-copied-before-the-postprocess", monkeypatch)
    match = r"the next step's corrected seq_len \(less its query\).*: got \d+, want \d+"
    assert_serving_runs_fail(impl, device, "host-counts-copied-before-the-postprocess", match, padded=True)


def test_next_step_drafts_of_the_batch_rows_fail_the_next_steps_input_ids(monkeypatch, device, impl):
    """The next step's input ids as the runner's kernels write them (``handoff.handed_on``): read at batch rows, a
    reordered step's rows hold other requests' tokens and drafts."""
    _applied("next-step-drafts-of-the-batch-rows", monkeypatch)
    match = r"the next step's input ids: got \["
    assert_serving_runs_fail(impl, device, "next-step-drafts-of-the-batch-rows", match, padded=True)


def test_an_mla_draft_rotated_at_the_step_before_fails_by_name(monkeypatch, device, impl):
    """Main's speculator hands each draft step's builder the step's positions, which an MLA draft's builder
    gathers its cos/sin at: positions one back rotate every step by the position before, named."""
    _applied("draft-rope-of-the-step-before", monkeypatch)
    with pytest.raises(AssertionError, match=r"step \d rope positions\[\d+:\].*: got \["):
        check_implementation(impl, dataclasses.replace(TYPICAL, draft_attn="mla"), device, "draft-rope-step-before")


@pytest.mark.parametrize("name", STATES)
def test_draft_steps_labelled_prefill_no_cache_fail_by_name(monkeypatch, device, impl, name):
    _applied(name, monkeypatch)
    # padded: MRV2 has no unpadded path (no-unpadded-path), and a run asking for one is refused
    assert_serving_runs_fail(impl, device, name, r"step [2-9]: the attention reads no cached context", padded=True)


HYBRID = dataclasses.replace(TYPICAL, block_size=8, kernel_block_size=2)
KERNEL_BLOCKS = {
    "kernel-blocks-one-further-on": r"request \d+: kernel block column \d+ holds \d+, not kernel block",
    "kernel-slots-by-the-block-size": r"KV cache slot \d+ is past the cache|slot_mapping",
}


@pytest.mark.parametrize("mode", ["eager", "full"])
@pytest.mark.parametrize("name", list(KERNEL_BLOCKS))
def test_a_broken_kernel_block_layout_fails_a_hybrid_targets_run_by_name(monkeypatch, device, impl, name, mode):
    """A hybrid target's kernel blocks as the MRV2 runner's ``BlockTables`` hold them: its conversion one kernel
    block on is named at the read (``kernel_blocks.check``), its slot kernel handed the scheduler's block size at
    a slot past the cache (or a slot compared), eagerly and replayed."""
    _applied(name, monkeypatch)
    if mode == "full" and graphs.lacks():
        pytest.skip(f"this checkout's MRV2 full graphs are not driven: {graphs.lacks()}")
    scenario = dataclasses.replace(HYBRID, graph_mode=mode, capture_sizes=(2, 8) if mode == "full" else None)
    with pytest.raises((AssertionError, IndexError), match=KERNEL_BLOCKS[name]):
        check_implementation(impl, scenario, device, f"broken-{name}")


SAMPLING = {
    "output-copied-before-the-sampler-finishes": (
        StreamOrderError,
        r"a non-blocking copy to the host on side stream \d+ reads a device tensor .* last written on the default stream",
    ),
    "drafts-kept-at-the-batch-rows": (AssertionError, r"draft \d \(.*\): got \d+, want \d+"),
    "reported-sampled-tokens-one-short": (AssertionError, r"the runner's valid sampled tokens: got \["),
}


@pytest.mark.parametrize("name", list(SAMPLING))
def test_a_broken_sampling_half_fails_a_serving_run_by_name(monkeypatch, device, impl, name):
    """Where the runner samples (``Scenario.runner_samples``, vLLM's ``sample_tokens`` as vllm-ascend's MRV2 runner
    inherits it): the sampled tokens copied to the host before the sampler wrote them (the simulator's stream order
    names the copy), the scheduler reported one token short of what was sampled, the drafts kept where the next step
    does not take them from."""
    _applied(name, monkeypatch)
    error, match = SAMPLING[name]
    with pytest.raises(error, match=match):
        check_implementation(impl, dataclasses.replace(TYPICAL, runner_samples=True), device, name)


CONTROLS = [
    pytest.param("async-output", "__init__", sampling_breaks.output_copy_ordered_by_an_event, id="copy-after-an-event"),
    pytest.param("vllm-runner", "sample_tokens", sampling_breaks.drafts_kept_by_index_copy, id="drafts-by-index-copy"),
]


@pytest.mark.parametrize(("where", "attribute", "change"), CONTROLS)
def test_a_sampling_half_written_otherwise_passes(monkeypatch, device, impl, where, attribute, change):
    """The same sampling half written otherwise, and right: the copy ordered after the sampler by an event, the
    drafts kept in their state rows by ``index_copy_``. The gate blocks neither."""
    changed = broken_gate.owner(where)
    monkeypatch.setattr(changed, attribute, change(getattr(changed, attribute)))
    for asynchronous in (False, True):
        scenario = dataclasses.replace(TYPICAL, runner_samples=True, async_scheduling=asynchronous)
        check_implementation(impl, scenario, device, change.__name__)
