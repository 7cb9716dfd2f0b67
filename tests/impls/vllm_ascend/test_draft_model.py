"""vllm-ascend's draft-model drafter (``AscendDraftModelProposer``): a break the gate catches, and what
its full graphs do.

Eagerly it is held to the spec by the gate's properties (test_core_properties.py's draft-model first
pass and steps, test_mrope_eagle3.py's serving runs). In full graphs it crashes or attends one key short,
two known defects pinned here; the gate does not run a draft model's full graphs
(``Feature.DRAFT_MODEL_FULL_GRAPHS``), so a pin is where each shows, on every run, until it is fixed. Over
a hybrid target's kernel blocks its first pass writes other slots, a third (``Feature.DRAFT_MODEL_KERNEL_BLOCKS``).
"""

from __future__ import annotations

import dataclasses
import traceback

import pytest

from sim.impls.features import Feature
from sim.impls.kit.ascend import fake_npu_graphs
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import branch_divergences, build, generation
from sim.impls.vllm_ascend.adapter import AscendProposer
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import check_implementation
from tests.checks.known_defects import DEFECT, pin
from tests.impls.fixes import defining_class
from tests.impls.vllm_ascend import broken_gate
from tests.impls.vllm_ascend.method_breaks import draft_model_host_lengths_not_grown
from tests.properties.test_mrope_eagle3 import SMALL as PATHS_SMALL
from tests.properties.test_propose_loop import TYPICAL

# Three requests of K + 1 = 2 tokens after their prompts: 6 rows, which a FULL graph pads to 8 (4 requests).
BETWEEN_SIZES = Scenario(
    num_spec_tokens=1,
    block_size=4,
    graph_mode="full",
    capture_sizes=(4, 8),
    accept="greedy",
    method="draft_model",
    requests=(RequestSpec(0, 2, 4),) * 3,
)
# One request, K = 1: its decode's 2 rows are a captured size (no request padded), and the drafter's
# 3 rows dispatch to a FULL graph.
ONE_DECODE = Scenario(
    num_spec_tokens=1,
    block_size=1,
    max_model_len=12,
    token_budget=2,
    max_num_reqs=2,
    accept="greedy",
    graph_mode="full",
    method="draft_model",
    requests=(RequestSpec(0, 1, 2),),
)


# The gate's early draft-model case (test_mrope_eagle3.py's SMALL), run eagerly: prompts, then decodes.
EAGER = dataclasses.replace(PATHS_SMALL, method="draft_model")
# The gate's typical run with a draft model on a hybrid target's layout: blocks of 8 tokens, kernel blocks of 2.
OVER_KERNEL_BLOCKS = dataclasses.replace(TYPICAL, method="draft_model", block_size=8, kernel_block_size=2)


@pytest.fixture(autouse=True)
def _no_graph_left_launched():
    yield
    fake_npu_graphs.reset()


@pytest.fixture(autouse=True)
def _a_driven_draft_model():
    """Each test here drives the checkout's draft-model drafter: where the adapter does not, it says why."""
    lacking = branch_divergences.in_force(generation.name()).LACKS.get(Feature.DRAFT_MODEL)
    if lacking is not None:
        pytest.skip(f"generation {generation.name()}: {lacking.reason}")


def test_the_drafter_is_built_from_a_draft_model_config():
    """The drafter's speculative config is a draft model's (vLLM's ``uses_draft_model``), as a deployment's
    ``--speculative-config '{"method": "draft_model", ...}'`` gives it: the checkout's code that branches on it
    (vllm-ascend #14510's eager drafter) takes the draft model's branch. A draft whose folder name holds
    "eagle-" is taken for an EAGLE head by vLLM, whatever method it was given."""
    config = build.configured(1, 2, 64, EAGER.hidden_size, method="draft_model").speculative_config
    assert (config.method, config.uses_draft_model()) == ("draft_model", True)


def test_a_drafter_that_drafts_eagerly_under_full_graphs_is_held_to_the_spec(monkeypatch, device, impl):
    """A draft-model drafter that decides to draft eagerly under a full-graph target (its ``use_cuda_graph``
    False, as vllm-ascend #14510 builds it) replays no graph, and its calls are held to their own rows: the
    decode that follows ``draft-model-graph-seq-lens-of-the-target`` in a FULL graph equals the spec."""
    built = build.graph_proposer

    def eager(*args):
        proposer = built(*args)
        proposer.use_cuda_graph = False  # the drafter's own decision, made in its constructor
        return proposer

    monkeypatch.setattr(build, "graph_proposer", eager)
    build._graph_proposer.cache_clear()
    monkeypatch.setattr(fake_npu_graphs.NPUGraph, "replay", _no_replay)
    try:
        report = run_scenario(ONE_DECODE, device, proposer_cls=AscendProposer, rules=impl.rules)
    finally:
        build._graph_proposer.cache_clear()
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def _no_replay(graph):
    raise AssertionError("a graph replayed: the drafter drafts eagerly")


def test_host_lengths_not_grown_fail_the_gate(monkeypatch, device, impl):
    """A draft model's first pass whose host seq_lens are left as the target's (vLLM's
    ``extend_all_queries_by_N`` alone): the attention vllm-ascend's builder hands the kernels reads one
    key short: the gate's early draft-model case fails at its first pass's host mirror check."""
    proposer = build.configured(1, 2, 64, EAGER.hidden_size, method="draft_model")
    cls = defining_class(proposer, "set_inputs_first_pass")
    monkeypatch.setattr(cls, "set_inputs_first_pass", draft_model_host_lengths_not_grown(cls.set_inputs_first_pass))
    with pytest.raises(AssertionError, match=r"step 1: host mirror \w*seq_lens_cpu is not seq_lens"):
        check_implementation(impl, EAGER, device, "broken-draft-model-host-lengths")


def test_a_draft_model_after_a_padded_target_step_follows_its_known_defect(device, impl):
    """draft-model-graph-block-table-of-padded-requests: after a target step padded to a FULL graph's
    requests, the first pass counts the requests by the block table's rows and raises (vllm-ascend
    #14714); fixed, the run goes through."""
    try:
        run_scenario(BETWEEN_SIZES, device, proposer_cls=AscendProposer, rules=impl.rules)
    except RuntimeError as crash:
        frames = [frame.name for frame in traceback.extract_tb(crash.__traceback__)]
        assert "compute_new_slot_mapping" in frames, crash
        pin("draft-model-graph-block-table-of-padded-requests", True, False, crash)
        return
    pin("draft-model-graph-block-table-of-padded-requests", False, True)


def test_a_draft_model_in_a_full_graph_follows_its_known_defect(device, impl):
    """draft-model-graph-seq-lens-of-the-target: the decode's drafter step, dispatched to a FULL graph,
    attends with the target's seq_lens, one short of its grown rows' (and its draft differs); fixed, the
    call equals the spec."""
    report = run_scenario(
        ONE_DECODE, device, proposer_cls=AscendProposer, rules=impl.rules, stop_at_first_mismatch=False
    )
    short = [m for m in report.mismatches if m.what.startswith("first pass seq_lens")]
    followed = pin(
        "draft-model-graph-seq-lens-of-the-target",
        bool(short) and all(got == want - 1 for m in short for got, want in zip(m.got, m.want)),
        report.ok,
        [str(m) for m in report.mismatches],
    )
    if followed == DEFECT:
        assert report.iterations > 1 and all(m.iteration >= 1 for m in report.mismatches), report.mismatches


def _over_kernel_blocks(impl):
    """``impl`` running what the gate does not: a draft model over kernel blocks (the lack the pin below pins)."""
    lacks = {f: skip for f, skip in impl.lacks.items() if f != Feature.DRAFT_MODEL_KERNEL_BLOCKS}
    return dataclasses.replace(impl, lacks=lacks)


def test_a_draft_model_over_kernel_blocks_follows_its_known_defect(monkeypatch, device, impl):
    """draft-model-first-pass-slots-by-the-block-size: over a hybrid target's table of kernel blocks the first
    pass hands ``compute_new_slot_mapping`` the KV-cache group's block size, and the run writes a slot of
    another block (here past the cache); fixed (the kernel block size handed), the run equals the spec."""
    module = import_ascend("vllm_ascend.spec_decode.llm_base_proposer")
    handed: list[int] = []

    def recording(*args, **kwargs):
        handed.append(kwargs["block_size"])
        return slot_mapping(*args, **kwargs)

    slot_mapping = module.compute_new_slot_mapping
    monkeypatch.setattr(module, "compute_new_slot_mapping", recording)
    try:
        run_scenario(OVER_KERNEL_BLOCKS, device, _over_kernel_blocks(impl))
    except (IndexError, AssertionError) as failed:
        by_block = set(handed) == {OVER_KERNEL_BLOCKS.block_size}
        pin("draft-model-first-pass-slots-by-the-block-size", by_block, False, f"{failed}; block sizes {handed}")
        return
    pin("draft-model-first-pass-slots-by-the-block-size", False, True)


def test_the_fix_of_the_padded_block_table_goes_through(monkeypatch, device, impl):
    """With vllm-ascend #14714's fix (``draft-model-block-table-aligned``) the run after a padded target step
    drafts, and equals the spec (its drafter steps run eagerly: 9 rows, past the largest size)."""
    broken_gate.apply("draft-model-block-table-aligned", monkeypatch)
    report = run_scenario(BETWEEN_SIZES, device, proposer_cls=AscendProposer, rules=impl.rules)
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_the_fix_of_the_first_pass_slots_over_kernel_blocks_meets_the_spec(monkeypatch, device, impl):
    """With the first pass taking the kernel block size (``draft-model-slots-by-the-kernel-block``), a draft model
    over a hybrid target's kernel blocks equals the spec, and the pin says it is fixed."""
    broken_gate.apply("draft-model-slots-by-the-kernel-block", monkeypatch)
    report = run_scenario(OVER_KERNEL_BLOCKS, device, _over_kernel_blocks(impl))
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def _query_starts_of_the_target() -> bool:
    """Whether the checkout's FULL-graph branch pads the runner's query starts (v0.22.1rc and before)."""
    return branch_divergences.DRAFT_MODEL_QUERY_STARTS.id in branch_divergences.in_force(generation.name()).DIVERGENCES


def test_the_fix_of_the_target_seq_lens_meets_the_spec(monkeypatch, device, impl):
    """With the FULL-graph branch keeping a draft model's grown lengths (``draft-model-grown-seq-lens-kept``)
    the decode's replayed call equals the spec, drafts included (where the branch pads the runner's query starts
    too, with that fixed as well: the pin below)."""
    broken_gate.apply("draft-model-grown-seq-lens-kept", monkeypatch)
    if _query_starts_of_the_target():
        broken_gate.apply("draft-model-query-starts-of-the-call", monkeypatch)
    report = run_scenario(ONE_DECODE, device, proposer_cls=AscendProposer, rules=impl.rules)
    assert report.ok, [str(m) for m in report.mismatches[:4]]


def test_a_draft_models_full_graph_query_starts_follow_their_known_defect(monkeypatch, device, impl):
    """draft-model-graph-query-starts-of-the-target (v0.22.1rc and before): with the lengths kept (their own
    defect fixed), the decode's replayed first pass splits its rows at the target's query starts, each one row
    short per request before it; fixed, the call equals the spec (the test above)."""
    if not _query_starts_of_the_target():
        pytest.skip("the checkout's FULL-graph branch pads a copy of the call's query starts (0.23.0 on)")
    broken_gate.apply("draft-model-grown-seq-lens-kept", monkeypatch)
    report = run_scenario(
        ONE_DECODE, device, proposer_cls=AscendProposer, rules=impl.rules, stop_at_first_mismatch=False
    )
    starts = [m for m in report.mismatches if m.what.startswith("first pass query_start_loc")]
    pin(
        branch_divergences.DRAFT_MODEL_QUERY_STARTS.id,
        bool(starts) and all(g == w - 1 - i for m in starts for i, (g, w) in enumerate(zip(m.got, m.want))),
        report.ok,
        [str(m) for m in report.mismatches],
    )
