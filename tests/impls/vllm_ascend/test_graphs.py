"""vllm-ascend's full-graph drafting on the simulator: its captures, replays and parameter updates.

The adapter in ``mode="full"`` captures through vllm-ascend's dummy runs and drafts through its own
dispatch, ``ACLGraphWrapper`` replay and ``update_full_graph_params`` (``sim.impls.vllm_ascend.graphs``).
Here: the two divergences of that mode pinned, and four breaks of it from vllm-ascend's graph-bug
history, each caught by the serving check the gate's graph property runs.
"""

from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace

import pytest

from devices.base import GraphError
from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend import fake_npu_graphs
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.dummy_kv import DummyRunWroteKv
from sim.impls.vllm_ascend import build, crashes, generation, handoff
from sim.impls.vllm_ascend.adapter import AscendProposer
from sim.impls.vllm_ascend.branch_divergences import (
    CAPTURE_GROUP_0,
    DUMMY_STALE_INDICES,
    DUMMY_WRITES_KV,
    MTP_MODEL_GRAPH,
    PADDING_STALE_INDICES,
)
from sim.impls.vllm_ascend.build import configured_graph
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import after_a_call, check_implementation
from tests.checks.known_defects import pin, pin_a_crash
from tests.impls.fixes import defining_class, edited
from tests.impls.vllm_ascend import broken_gate, graph_breaks
from tests.properties.test_propose_loop import TYPICAL

# Prefills, then uniform decodes (every request K + 1 tokens: graphed), some drafts rejected.
FULL = Scenario(
    num_spec_tokens=3,
    block_size=4,
    graph_mode="full",
    capture_sizes=(4, 8, 16),
    accept="random",
    seed=3,
    requests=(RequestSpec(0, 3, 10), RequestSpec(0, 4, 10), RequestSpec(3, 2, 8)),
)


@pytest.fixture(autouse=True)
def _no_graph_left_launched():
    yield
    fake_npu_graphs.reset()


def _config():
    """What ``configured_graph`` reads of a proposer config, for ``FULL``."""
    return SimpleNamespace(
        hidden_size=FULL.hidden_size,
        num_spec_tokens=FULL.num_spec_tokens,
        block_size=FULL.block_size,
        max_model_len=FULL.max_model_len,
        method=FULL.method,
    )


def _made():
    made = []

    def factory(*args, **kwargs):
        made.append(AscendProposer(*args, **kwargs))
        return made[-1]

    return made, factory


def _replays(proposer: AscendProposer) -> dict[int, int]:
    entries = proposer.graphed._runnable.concrete_aclgraph_entries
    return {desc.num_tokens: entry.aclgraph.replays for desc, entry in entries.items()}


def test_uniform_decodes_replay_vllm_ascends_graphs_and_match_the_reference(device, impl):
    """Each FULL key captured by a dummy run; the uniform decodes replay them (padded to the
    smallest size that holds them) and equal the reference, divergences modelled."""
    made, factory = _made()
    report = run_scenario(FULL, device, proposer_cls=factory, rules=impl.rules)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    replays = _replays(made[0])
    assert sorted(replays) == [4, 8, 16] and sum(replays.values()) > 0, replays


def test_a_batch_with_a_prefill_runs_eagerly_in_full_graph_mode(device, impl):
    """full-graphs-uniform-decode-only: without the rule, the reference wants every batch padded
    to a captured size; vllm-ascend pads only the uniform decodes, so only batches with a prefill
    (or fewer drafts) differ, and only in the rows they run at. Where the checkout's drafter pads every
    batch (v0.18.0's ``eager_batches_padded``), every batch is padded."""
    rules = dataclasses.replace(impl.rules, graphs_uniform_decode_only=False)
    report = run_scenario(FULL, device, proposer_cls=AscendProposer, rules=rules, stop_at_first_mismatch=False)
    if impl.rules.eager_batches_padded:
        assert report.ok, [str(m) for m in report.mismatches[:4]]
        return
    assert report.mismatches, "every batch was padded: has vllm-ascend started graphing prefills?"
    nearest = [m for m in report.mismatches if not m.also]
    assert all("rows run" in m.what for m in nearest), [str(m) for m in nearest[:4]]


def test_a_prompt_of_k_plus_one_tokens_runs_eagerly_in_full_graph_mode(device, impl):
    """A batch of first chunks of K + 1 tokens each has a uniform decode's shape but is a prefill: the
    runner's ``_determine_batch_execution_and_padding`` keeps it out of the graphs (every prompt must
    be computed first), and the reference agrees; its decodes, later, replay graphs."""
    prompts = dataclasses.replace(FULL, requests=(RequestSpec(0, 4, 6),) * 3)  # 12 rows: a graph pads to 16
    report = run_scenario(prompts, device, proposer_cls=AscendProposer, rules=impl.rules)
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_full_graphs_refuse_the_unpadded_drafter_batch(device, impl):
    """full-graphs-need-padded-batch: vllm-ascend's own check refuses full graphs with
    ``disable_padded_drafter_batch``; the adapter refuses an unpadded call in full mode, naming it."""
    p = configured_graph(_config(), (4, 8))
    if not hasattr(p, "_raise_if_padded_drafter_batch_disabled_and_full_graph_enabled"):
        pytest.skip(
            "this checkout's drafter has no such check (v0.21.0rc, v0.22.1rc): unpadded full graphs are not run, "
            "the adapter refuses them (full-graphs-need-padded-batch)"
        )
    spec = p.speculative_config
    old = spec.disable_padded_drafter_batch
    spec.disable_padded_drafter_batch = True
    try:
        with pytest.raises(NotImplementedError, match="padded drafter batch"):
            p._raise_if_padded_drafter_batch_disabled_and_full_graph_enabled()
    finally:
        spec.disable_padded_drafter_batch = old
    with pytest.raises(NotImplementedError, match="disable_padded_drafter_batch"):
        run_scenario(dataclasses.replace(FULL, padded=False), device, proposer_cls=AscendProposer, rules=impl.rules)


def test_a_merged_draft_graph_replays_as_the_runner_wraps_it():
    """The runner's constructor decides ``use_eagle`` (an mtp draft's: True), which its drafter hands the
    draft graph's ``ACLGraphWrapper``: a replay of the merged draft synchronizes nothing before it. The
    view once said False, and every replay synchronized first, landing pending copies early, where an NPU
    lands none (an early read there would have passed)."""
    p = configured_graph(_config(), (4, 8))
    assert p.runner.use_eagle is True
    assert getattr(p._runnable, "use_eagle", True) is True  # v0.18.0's mtp graphs wrap the model instead


def _break(monkeypatch, method: str, breaking) -> None:
    if method == "dispatch":
        cls = import_ascend("vllm.v1.cudagraph_dispatcher").CudagraphDispatcher
    else:
        cls = defining_class(configured_graph(_config(), (4, 8)), method)
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))


def test_graph_params_never_updated_are_caught(monkeypatch, device, impl):
    """No ``update_full_graph_params`` after a replay: its tasks wait on events nobody records."""
    _break(monkeypatch, "_update_full_graph_params", graph_breaks.params_not_updated)
    with pytest.raises(GraphError, match="never recorded"):
        run_scenario(FULL, device, proposer_cls=AscendProposer, rules=impl.rules)


@pytest.mark.parametrize(
    ("method", "breaking", "what"),
    [
        ("_update_full_graph_params", graph_breaks.params_of_the_first_step, "seq_lens"),
        ("dispatch", graph_breaks.sizes_reversed, "rows run"),
        ("_run_merged_draft", graph_breaks.sample_rows_from_padded_query_start_loc, "draft"),
    ],
    ids=["params-of-the-first-step", "capture-sizes-reversed", "sample-rows-from-padded-qsl"],
)
def test_a_broken_full_graph_path_fails_the_serving_check(monkeypatch, device, method, breaking, what, impl):
    _break(monkeypatch, method, breaking)
    try:
        report = run_scenario(FULL, device, proposer_cls=AscendProposer, rules=impl.rules, stop_at_first_mismatch=False)
    except GraphError as refused:  # a drafter that pads its rows itself (v0.18.0) replays another size's graph
        assert what == "rows run" and "but this graph was captured at size" in str(refused), refused
        return
    assert any(what in m.what for m in report.mismatches), [str(m) for m in report.mismatches[:4]] + [report.iterations]


def _handed_metadata(monkeypatch) -> list[tuple[int, int, int]]:
    """Each call's (requests, block-table rows, slots) of the metadata the runner hands its drafter."""
    handed = []
    built = handoff.as_built_for_the_target

    def recording(runner, cad, target):
        out = built(runner, cad, target)
        handed.append((out.num_reqs, out.block_table_tensor.shape[0], out.slot_mapping.shape[0]))
        return out

    monkeypatch.setattr(handoff, "as_built_for_the_target", recording)
    return handed


def test_a_padded_target_step_hands_the_drafter_the_runners_unpadded_metadata(monkeypatch, device, impl):
    """``FULL``'s uniform decodes of 3 requests replay the target's graph of 4: the runner builds the
    metadata at 4 requests and 16 tokens and hands the drafter the checkout's ``unpadded`` of it (3
    requests, the table's 4 rows and the 16 slots kept); the drafts still equal the reference."""
    handed = _handed_metadata(monkeypatch)
    report = run_scenario(FULL, device, proposer_cls=AscendProposer, rules=impl.rules)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    assert (3, 4, 16) in handed, handed


def test_an_unpadding_that_keeps_the_phantom_requests_fails_the_gate(monkeypatch, device, impl):
    """``unpadded`` that keeps a padded step's phantom requests: the drafter drafts for 4 requests where the
    step verified 3, and its input preparation reads past the batch's draft counts."""
    broken_gate.apply("unpadded-keeps-the-phantom-requests", monkeypatch)
    with pytest.raises(kernel_bounds.KernelOutOfBounds, match=r"cu_num_draft_tokens"):
        check_implementation(impl, FULL, device, "broken-unpadded-phantoms")


def test_an_unpadding_that_slices_the_table_and_slots_passes(monkeypatch, device, impl):
    """vllm-ascend #7755's ``unpadded``, which slices the table and the slots to the batch: the drafter pads
    what its graph needs itself, and drafts the same."""
    handed = _handed_metadata(monkeypatch)
    broken_gate.apply("unpadded-slices-the-table-and-slots", monkeypatch)
    check_implementation(impl, FULL, device, "unpadded-sliced")
    assert (3, 3, 12) in handed, handed


def test_a_replay_reads_the_block_table_of_the_drafts_group(monkeypatch, device, impl):
    """``full-graph-capture-reads-group-0-block-table``: ``TYPICAL`` under full graphs, the draft's layers in
    a KV-cache group of their own after the target's (``attn_setup``), group 0 holding none of the draft's
    blocks. A dummy run that captures on the draft's group's block table replays the reference's drafts
    (the spec); v0.21.0rc and v0.22.1rc's captures on group 0's, and their replays draft other tokens with
    other step lengths, or read KV past the cache (the defect). Accepted, the pin records which; dropped
    from the list, the spec holds. Where the checkout has it not, every full-graph run is this layout
    already: skipped, not run twice."""
    if not generation.capture_reads_group_0():
        pytest.skip(
            "this checkout captures on the draft's group's table: every full-graph run has the two groups "
            "(test_a_typical_serving_run_in_graph_mode_matches_reference[full] is this run)"
        )
    monkeypatch.setattr(build, "drafts_in_group_0", lambda: False)
    scenario = dataclasses.replace(TYPICAL, graph_mode="full", capture_sizes=(2, 8))
    if not any(d.id == CAPTURE_GROUP_0.id for d in impl.divergences):  # dropped from the list: the spec holds
        check_implementation(impl, scenario, device, "two-groups-full")
        return
    try:
        check_implementation(impl, scenario, device, "two-groups-full")
    except (AssertionError, IndexError) as found:  # IndexError: a KV slot past the cache (an NPU's device assert)
        pin(CAPTURE_GROUP_0.id, present=True, fixed=False, detail=found)
    else:
        pin(CAPTURE_GROUP_0.id, present=False, fixed=True)


def _dummy_run_after_a_call(device) -> tuple[AscendProposer, frozenset[int]]:
    """A dummy run of 2 tokens after a real call (``after_a_call``), as the next step of a DP rank with
    nothing scheduled while its requests live on: the proposer (its ``dummy_wrote``) and the KV slots the
    call's forwards were handed."""
    proposer, _ = after_a_call(device, AscendProposer)
    call = proposer.model.call_slots_written()
    proposer.dummy_run(2)
    return proposer, call


def test_a_dummy_run_after_a_call_writes_no_kv(monkeypatch, device, impl):
    """``dummy-run-writes-kv-at-the-last-calls-slots``: a dummy run after a real call writes no KV (0.23.0
    and main: its captures are built on the dummy batch's slots, -1); v0.21.0rc and v0.22.1rc's write draft
    KV at slots the call's forwards were handed, over its live requests' KV. Accepted, exactly those
    writes pass and the pin records them; dropped from the list, any write fails (``DummyRunWroteKv``)."""
    accepted = any(d.id == DUMMY_WRITES_KV.id for d in impl.divergences)
    if not accepted:
        monkeypatch.setattr(AscendProposer, "tolerates_dummy_writes", False)
    proposer, call = _dummy_run_after_a_call(device)
    written = set(proposer.dummy_wrote)
    assert written <= call, sorted(written - call)
    if accepted:
        pin(DUMMY_WRITES_KV.id, present=bool(written), fixed=not written, detail=sorted(written))
    else:
        assert not written


def test_a_dummy_run_after_a_larger_call_crashes_where_its_known_defect_says(device, impl):
    """``dummy-run-samples-at-the-last-calls-indices``: a dummy run of 2 tokens after a call that sampled rows
    past them. 0.23.0, main and v0.21.0rc on sample the dummy batch's own rows; v0.20.2rc's samples at the
    call's indices and raises (its crash sidestepped everywhere else, ``crashes``). Accepted, the pin runs it
    as the checkout has it and records the crash, or a dummy run that passes (fixed); dropped from the
    list, the dummy run must pass."""
    proposer, _ = after_a_call(device, AscendProposer)
    assert int(proposer._ascend().token_indices_to_sample.max()) >= 2, "the call sampled no row past the dummy's"
    _pin_a_crash(impl, DUMMY_STALE_INDICES.id, lambda: proposer.dummy_run(2))


def test_an_mtp_draft_in_full_graphs_replays_where_its_known_defect_says(device, impl):
    """``mtp-draft-steps-replay-one-model-graph``: an MTP draft of K = 4 in full graphs, captured, then one
    call. Later generations capture the merged draft (one replay a call); v0.18.0 captures the model and
    replays it at every draft step, its parameters updated once, after the draft: the simulator refuses the
    second replay while the first waits on its event (its crash sidestepped everywhere else, ``crashes``)."""
    _pin_a_crash(
        impl,
        MTP_MODEL_GRAPH.id,
        lambda: after_a_call(device, AscendProposer),
        GraphError,
        "while its last replay still waits on its events",
    )


def _pin_a_crash(impl, defect: str, run, crash=IndexError, says: str = "out of bounds") -> None:
    """``known_defects.pin_a_crash`` with the V1 drafter's sidesteps (an out-of-bounds gather unless told)."""
    pin_a_crash(impl, defect, run, crashes.letting, crash, says)


# Four one-token prompts' first call (eager: a batch with prefills), its last sample row past 8, then three
# of them decode (a uniform batch of 6 rows, replayed at the graph of 8, captured for 4 requests).
SHRINKING = Scenario(
    num_spec_tokens=1,
    block_size=1,
    max_model_len=12,
    token_budget=9,
    max_num_reqs=4,
    graph_mode="full",
    vocab_size=32,
    requests=(RequestSpec(0, 1, 1), RequestSpec(0, 1, 2), RequestSpec(0, 1, 2), RequestSpec(0, 6, 2)),
)


def test_a_replay_padded_past_a_smaller_call_crashes_where_its_known_defect_says(device, impl):
    """``graph-padding-samples-at-the-last-calls-indices`` (``SHRINKING``): a replay of fewer requests than its
    capture's gathers its padding rows at the sample indices the drafter's buffer holds past the call's own.
    0.23.0, main and v0.21.0rc on clear them (zeros); v0.20.2rc's are the last call's, and the gather
    raises (sidestepped everywhere else, ``crashes``). Accepted, the pin runs it as the checkout has it and
    records the crash, or a run that meets the reference (fixed); dropped from the list, the run must."""
    _pin_a_crash(
        impl,
        PADDING_STALE_INDICES.id,
        lambda: check_implementation(impl, SHRINKING, device, "replay-padded-past-a-smaller-call"),
    )


# 0.23.0's dummy run (and main's), per draft step, before it builds the capture on that step's slot buffer.
_DUMMY_SLOTS_COPIED = (
    "self.slot_mapping_group[draft_index][:slot_mapping_lens].copy_(common_attn_metadata.slot_mapping)",
    "self.slot_mapping_group[draft_index][slot_mapping_lens:].fill_(PADDING_SLOT_ID)",
)


def test_a_dummy_run_that_writes_kv_at_the_last_calls_slots_fails_the_gate(monkeypatch, device):
    """v0.22.1rc's dummy run put into this one: each draft step's capture built on the per-step slot buffer
    as the last real call left it, without first copying the dummy batch's slots (-1) in. Its dummy forwards
    write draft KV there, over live requests' KV on an NPU; the gate names the slots
    (``dummy_kv.writes_no_kv``)."""
    cls = defining_class(configured_graph(_config(), (4, 8)), "dummy_run")
    dummy_run = inspect.unwrap(cls.dummy_run)  # its own module's names: the decorator is compiled again
    if _DUMMY_SLOTS_COPIED[0] not in inspect.getsource(dummy_run):
        pytest.skip("this checkout's dummy run builds on the slot buffers as they are already (v0.22.1rc's)")
    monkeypatch.setattr(cls, "dummy_run", edited(dummy_run, *((line, "pass") for line in _DUMMY_SLOTS_COPIED)))
    with pytest.raises(DummyRunWroteKv, match="a dummy run wrote KV at"):
        _dummy_run_after_a_call(device)
