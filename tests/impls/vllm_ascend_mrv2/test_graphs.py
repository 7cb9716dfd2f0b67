"""vllm-ascend's MRV2 full graphs (``sim.impls.vllm_ascend_mrv2.graphs``): the decode steps' merged graph, captured
and replayed by the checkout's own graph manager, or refused with the reason where the checkout does not deploy
it (0.23.0 keeps its v2 runner dormant).

Where it is deployed: a full-graph serving run equals the reference, with a GQA, an MLA or an SFA draft layer, its
draft steps replayed from the captured graph (not run eagerly: the replays are counted), each step's attention
lengths those vllm-ascend's update wrote (GQA, MLA) or its build wrote in the graph (SFA), an MLA or SFA step's
rotation the cos/sin its build gathered in the graph; a speculator handing every step the first step's lengths (as
builders sharing one buffer across steps did, vllm-ascend #14236) fails the run at a step's ``seq_lens``, an SFA
builder handing its kernels one key too few likewise, and one handing an MLA or SFA step's builder the positions one
back at its rotation.
"""

from __future__ import annotations

import dataclasses

import pytest

from mtp.trace import Phase
from sim.impls.kit.ascend import patches
from sim.impls.vllm_ascend_mrv2 import crashes, graphs
from sim.impls.vllm_ascend_mrv2.adapter import AscendMrv2Proposer
from sim.impls.vllm_ascend_mrv2.divergences import DUMMY_SEQ_LENS, DUMMY_WRITES_KV
from sim.serving.run import run_scenario
from tests.checks.e2e_checks import after_a_call
from tests.checks.known_defects import pin, pin_a_crash
from tests.impls.vllm_ascend_mrv2 import broken_gate
from tests.properties.test_propose_loop import TYPICAL, TYPICAL_SFA

FULL = dataclasses.replace(TYPICAL, graph_mode="full", capture_sizes=(2, 8))
# per draft family: an SFA layer's kernels take blocks of 128 tokens (TYPICAL_SFA's)
FULL_OF = {
    "gqa": FULL,
    "mla": dataclasses.replace(FULL, draft_attn="mla"),
    "sfa": dataclasses.replace(TYPICAL_SFA, graph_mode="full", capture_sizes=(2, 8)),
}


def _deployed() -> None:
    reason = graphs.lacks()
    if reason is not None:
        pytest.skip(f"this checkout's MRV2 full graphs are not driven: {reason}")


def test_full_graphs_are_refused_with_the_reason_where_the_checkout_does_not_deploy_its_manager(device, impl):
    """The lack follows the checkout's worker package (``patches.deployed``), never a version's name: where it
    does not deploy vllm-ascend's graph manager, a full-graph proposer is refused naming why, and the gate's
    full-graph properties skip with the same reason."""
    reason = graphs.lacks()
    if reason is None:
        assert all(patches.file(patches.WORKER, name).exists() for name in graphs.GRAPH_PATCHES)
        pytest.skip("this checkout deploys vllm-ascend's MRV2 graph manager: its full graphs are driven")
    with pytest.raises(ValueError, match="deploys no patch_v2"):
        run_scenario(FULL, device, impl)


@pytest.mark.parametrize("attn", sorted(FULL_OF))
def test_a_full_graph_run_replays_its_draft_steps_and_matches_the_reference(device, impl, attn):
    _deployed()
    made = []

    def recorded(*args, **kwargs):
        made.append(AscendMrv2Proposer(*args, **kwargs))
        return made[-1]

    report = run_scenario(FULL_OF[attn], device, impl, proposer_cls=recorded)
    assert report.ok, report.mismatches[:3]
    spec = made[0].graphed
    assert made[0].captured_sizes()[Phase.STEP], "no decode graph captured"
    replays = sum(g.replays for g in spec.decode_cudagraph_manager.graphs.values())
    assert replays > 0, "the draft steps ran eagerly: no decode graph was replayed"


def test_steps_handed_the_first_steps_lengths_fail_a_full_graph_run_by_name(monkeypatch, device, impl):
    _deployed()
    broken_gate.apply("graph-steps-share-the-first-steps-lengths", monkeypatch)
    report = run_scenario(FULL, device, impl)
    assert not report.ok and any("step 3 seq_lens" in str(m) for m in report.mismatches), report.mismatches[:3]


@pytest.mark.parametrize("attn", ["mla", "sfa"])
def test_a_draft_rotated_at_the_step_before_fails_a_full_graph_run_by_name(monkeypatch, device, impl, attn):
    """The rotation a replayed MLA or SFA step reads is the cos/sin its build gathered inside the graph: main's
    speculator handing each step's builder the positions one back fails the run by name."""
    _deployed()
    broken_gate.apply("draft-rope-of-the-step-before", monkeypatch)
    report = run_scenario(FULL_OF[attn], device, impl)
    assert not report.ok and any("rope positions" in str(m) for m in report.mismatches), report.mismatches[:3]


@pytest.mark.parametrize("mode", ["eager", "full"])
def test_an_sfa_builder_handing_keys_one_short_fails_a_run_by_name(monkeypatch, device, impl, mode):
    """An SFA draft's key lengths are what the checkout's builder wrote for the step, read by the sparse kernels on
    the device: in a full graph, what the step's build wrote in the graph at each replay. A builder handing each
    request one key too few fails the run at a draft step's ``seq_lens``, eagerly and replayed."""
    _deployed()
    broken_gate.apply("sfa-builder-keys-one-short", monkeypatch)
    scenario = FULL_OF["sfa"] if mode == "full" else TYPICAL_SFA
    report = run_scenario(scenario, device, impl)
    assert not report.ok and any("step 2 seq_lens" in str(m) for m in report.mismatches), report.mismatches[:3]


def test_a_dummy_run_after_a_call_writes_where_its_known_defect_says(monkeypatch, device, impl):
    """``dummy-run-draft-steps-write-the-rows-last-blocks``: a dummy run after a real call, in full graphs (an idle
    DP rank keeping step). Main's draft steps compute their slots from the staged rows the dummy's requests map to,
    which hold the last call's blocks: accepted, exactly writes inside those rows' blocks pass and the pin records
    them (a dummy run writing none is the spec: fixed); dropped from the list, any write fails."""
    _deployed()
    accepted = any(d.id == DUMMY_WRITES_KV.id for d in impl.divergences)
    if not accepted:
        monkeypatch.setattr(AscendMrv2Proposer, "tolerates_dummy_writes", False)
    proposer, _ = after_a_call(device, AscendMrv2Proposer)
    blocks = graphs.rows_blocks_slots(proposer.graphed, proposer.graphed.max_num_reqs, proposer.cfg.block_size)
    assert blocks, "the call left no blocks in the speculator's rows"
    proposer.dummy_run(2)
    written = proposer.dummy_wrote
    if accepted:
        pin(DUMMY_WRITES_KV.id, present=bool(written), fixed=not written, detail=written)
    else:
        assert not written


def test_a_dummy_run_of_fewer_requests_than_its_graph_crashes_where_its_known_defect_says(device, impl):
    """``dummy-run-seq-lens-of-its-requests``: a dummy run of two requests (an idle DP rank beside a peer running
    two), whose decode graph replays at the smallest captured request count above. Main's dummy batch hands the
    host lengths of its two requests, which ``_update_decode_attn_metadata`` copies into the padded step's
    (a size mismatch; its crash sidestepped everywhere else, ``crashes``): accepted, the pin runs it as the checkout
    has it and records the crash, or a run that passes (fixed); dropped from the list, the dummy run must pass."""
    _deployed()
    proposer, _ = after_a_call(device, AscendMrv2Proposer)
    q = proposer.cfg.num_spec_tokens + 1
    assert min(graphs.captured_sizes(proposer.graphed)) > 2, "the decode graph is captured for two requests"
    pin_a_crash(impl, DUMMY_SEQ_LENS.id, lambda: proposer.dummy_run(2 * q), crashes.letting, RuntimeError, "size")
