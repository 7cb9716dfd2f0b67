"""The full propose loop on a simulated serving run equals the from-scratch reference.

Every draft token (margin-aware) and every piece of per-step metadata, over
multi-iteration scenarios with prefills, partial prefills, decodes, requests
leaving, block reuse and max_model_len overflow.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st

from mtp.proposer import FIRST, STEP, MtpProposer
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import (
    check_dummy_run_matches_propose,
    check_greedy_outputs,
    check_implementation,
    check_scenario,
)
from tests.checks.example_budget import share
from tests.checks.modes import (
    GRAPH_ONLY,
    MODES,
    NEEDS_GRAPHS,
    PADDING,
    USES_DRAFT_ATTN_GROUPS,
    USES_DRAFT_MODEL,
    USES_DUMMY_RUN,
    USES_EAGLE,
    USES_EAGLE3,
    USES_FULL_GRAPHS,
    USES_KERNEL_BLOCKS,
    USES_MLA_DRAFT,
    USES_SFA_DRAFT,
    USES_UNPADDED,
)
from tests.strategies.scenarios import kernel_block_sizes, scenarios

pytestmark = pytest.mark.order(2)  # whole serving runs: after the single-call properties

# Scenarios cost ~0.2 s each: the ci profile's 200 examples per property
# become 100 eager scenarios and 40 per graph mode (each mode also runs in
# tests/meta/test_broken_caught.py, and every graph example checks the padding).
EAGER = share(2)
GRAPHS = share(5)
GROUPS = share(8)  # a configuration of its own: the loop above runs the rest of what it could break
FAMILY = share(8)  # likewise: an MLA or SFA draft changes the builder and the rotation, the loop is the one above
KERNEL_BLOCKS = share(16, at_least=4)  # likewise (the table handed differs); over its modes at least 12
DECODE_NODE = share(16, at_least=4)  # likewise (the arrival differs); over its six parameters at least 24
# The SFA kernels take 128-token blocks (vllm-ascend's AscendSFABackend): an SFA draft runs at those.
SFA_BLOCK = 128
# The draft attention families besides GQA, each with the scenario fields it runs with.
FAMILIES = [pytest.param("mla", marks=USES_MLA_DRAFT), pytest.param("sfa", marks=USES_SFA_DRAFT)]
FAMILY_FIELDS = {"mla": {"draft_attn": "mla"}, "sfa": {"draft_attn": "sfa", "block_size": SFA_BLOCK}}


def _check(device, impl, scenario, padded, mode, name, **fields):
    """The run's calls against the reference; under greedy verification its outputs against the target's
    own greedy decoding too (``check_greedy_outputs``)."""
    scenario = dataclasses.replace(scenario, padded=padded, graph_mode=mode, **fields)
    report = check_implementation(impl, scenario, device, name)
    for feature in report.features:
        event(feature)
    if scenario.accept == "greedy" and report.outputs:
        check_greedy_outputs(scenario, report)


@pytest.mark.parametrize("padded", PADDING)
@EAGER
@given(scenario=scenarios())
def test_drafts_and_metadata_match_reference(device, impl, padded, scenario, request):
    _check(device, impl, scenario, padded, "eager", request.node.name)


@pytest.mark.parametrize("mode", GRAPH_ONLY)
@pytest.mark.parametrize("padded", PADDING)
@GRAPHS
@given(scenario=scenarios())
def test_graph_modes_match_reference(device, impl, padded, mode, scenario, request):
    """Piecewise and full graphs (padded to captured sizes) equal the reference, hence eager."""
    _check(device, impl, scenario, padded, mode, request.node.name)


@pytest.mark.parametrize("padded", PADDING)
@USES_DRAFT_ATTN_GROUPS
@GROUPS
@given(scenario=scenarios())
def test_a_draft_of_two_attention_groups_matches_reference(device, impl, padded, scenario, request):
    """A draft whose layers form two attention groups (an MLA/SFA layer and its indexer: two backends,
    one KV-cache group) attends in each layer with that step's metadata: the state advances once per
    step, whatever the number of groups."""
    _check(device, impl, scenario, padded, "eager", request.node.name, draft_attn_groups=2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", PADDING)
@pytest.mark.parametrize("attn", FAMILIES)
@FAMILY
@given(scenario=scenarios())
def test_a_draft_of_each_family_matches_reference(device, impl, attn, padded, mode, scenario, request):
    """An MLA draft layer (a DeepSeek MTP layer's) or an SFA one (a DeepSeek V3.2 / GLM-5 MTP layer's, at
    128-token blocks), its metadata built by the implementation's builder of that family: each call's
    lengths, tables and slots as its kernels read them (MLA: the decode and prefill parts' host lists;
    SFA: device tensors), the positions its RoPE is given in the metadata (cos and sin), and the drafts;
    eagerly and in each graph mode (padded to captured sizes, what a replay reads of the metadata it
    was captured with)."""
    _check(device, impl, scenario, padded, mode, request.node.name, **FAMILY_FIELDS[attn])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", PADDING)
@USES_KERNEL_BLOCKS
@KERNEL_BLOCKS
@given(scenario=scenarios(), data=st.data())
def test_a_hybrid_targets_kernel_blocks_match_reference(device, impl, padded, mode, scenario, data, request):
    """A hybrid target's layout (Qwen3.5's): each block split into kernel blocks of a drawn size, the runner's
    table of them handed on; every slot the drafter computes and every block its attention reads are the
    blocks' (``Scenario.kernel_block_size``), eagerly and in each graph mode."""
    assume(scenario.block_size > 1)
    kernel = data.draw(kernel_block_sizes(scenario.block_size), label="kernel_block_size")
    _check(device, impl, scenario, padded, mode, request.node.name, kernel_block_size=kernel)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", PADDING)
@DECODE_NODE
@given(scenario=scenarios())
def test_a_decode_node_matches_reference(device, impl, padded, mode, scenario, request):
    """The decode node of a prefill/decode split: every request arrives with its prompt's KV in place and
    the token the prefill node sampled, and its first step verifies no drafts (``Scenario.decode_node``)."""
    _check(device, impl, scenario, padded, mode, request.node.name, decode_node=True)


@pytest.mark.order(0)  # one call and one dummy run: as cheap as the core properties, so beside them
@NEEDS_GRAPHS
@USES_FULL_GRAPHS
@USES_DUMMY_RUN
def test_dummy_run_in_graph_mode_computes_logits_like_a_real_call(device, impl):
    """A dummy run (what a rank with no requests issues to keep step with the others) computes logits,
    and so under PCP or TP runs its collectives, as often as a real call (bug class 7)."""
    check_dummy_run_matches_propose(device, impl.proposer_cls)


# One serving run of every kind of iteration: prefills chunked by the token budget, decodes that
# reject drafts at random, requests leaving and arriving, a sequence reaching max_model_len.
TYPICAL = Scenario(
    num_spec_tokens=3,
    max_model_len=28,
    token_budget=12,
    max_num_reqs=4,
    max_iterations=16,
    requests=(RequestSpec(0, 9, 6), RequestSpec(0, 3, 10), RequestSpec(1, 14, 14), RequestSpec(3, 5, 3)),
)


@pytest.mark.order(0)  # a second or so: beside the single-call properties, so a loop regression fails early
def test_a_typical_serving_run_matches_reference(device, impl, request):
    """One fixed serving run (``TYPICAL``, padded) equals the reference, before any drawn one: most
    regressions of the whole loop show on it, seconds into the gate instead of after every
    single-call property."""
    check_implementation(impl, TYPICAL, device, request.node.name)


TYPICAL_SFA = dataclasses.replace(TYPICAL, **FAMILY_FIELDS["sfa"])

# Fixed runs at the edges upstream's reports name: seven drafts per step running into max_model_len
# (a slot buffer sized for fewer drafts, #14114); drafts stepping into the last block of a request's
# row and past it at max_model_len (#9098/#9139); 128-token blocks, the drafts crossing a block of them.
EDGES = {
    "seven-drafts-into-max-model-len": Scenario(
        num_spec_tokens=7,
        block_size=4,
        max_model_len=32,
        token_budget=24,
        max_num_reqs=3,
        max_iterations=14,
        accept="all",
        requests=(RequestSpec(0, 9, 40), RequestSpec(0, 30, 8), RequestSpec(2, 3, 12)),
    ),
    "last-block-of-the-row": Scenario(
        num_spec_tokens=3,
        block_size=8,
        max_model_len=24,
        token_budget=12,
        max_num_reqs=2,
        max_iterations=12,
        requests=(RequestSpec(0, 20, 20), RequestSpec(0, 15, 20)),
    ),
    "blocks-of-128": Scenario(
        num_spec_tokens=3,
        block_size=128,
        max_model_len=320,
        token_budget=64,
        max_num_reqs=2,
        max_iterations=10,
        requests=(RequestSpec(0, 125, 12), RequestSpec(0, 250, 12)),
    ),
}


@pytest.mark.order(0)
@pytest.mark.parametrize("attn", ["gqa", pytest.param("mla", marks=USES_MLA_DRAFT)])
@pytest.mark.parametrize("edge", list(EDGES))
def test_a_serving_run_at_an_edge_matches_reference(device, impl, edge, attn, request):
    """Each of ``EDGES``, padded, eagerly, with each draft attention (an MLA draft's rotation runs into
    ``max_model_len`` too): seconds into the gate, before any drawn run."""
    check_implementation(impl, dataclasses.replace(EDGES[edge], draft_attn=attn), device, request.node.name)


@pytest.mark.order(0)
@USES_SFA_DRAFT
@pytest.mark.parametrize("edge", list(EDGES))
def test_a_serving_run_of_an_sfa_draft_at_an_edge_matches_reference(device, impl, edge, request):
    """Each of ``EDGES`` with an SFA draft, at the 128-token blocks its kernels take (seven drafts per step
    and drafts past ``max_model_len`` then fall in a request's one block), eagerly."""
    scenario = dataclasses.replace(EDGES[edge], **FAMILY_FIELDS["sfa"])
    check_implementation(impl, scenario, device, request.node.name)


# A 64k-token context on a decode node (its prompt's KV transferred, so no 64k-token prefill), in blocks of
# 128: a block-table row of 512 blocks, slots past 2**16 and positions near it for a draft's rotation, the
# inputs at which upstream's users see acceptance fall (vllm-ascend #10495). Six iterations: each call's
# steps attend over 65k keys (the cost of this run), and four calls hold both requests.
LONG_CONTEXT = Scenario(
    block_size=128,
    max_model_len=65536,
    token_budget=64,
    max_num_reqs=2,
    max_iterations=6,
    accept="greedy",
    decode_node=True,
    requests=(RequestSpec(0, 65400, 12), RequestSpec(1, 30000, 8)),
)


@pytest.mark.order(0)
@pytest.mark.parametrize("attn", ["gqa", *FAMILIES])
def test_a_64k_context_on_a_decode_node_matches_reference(device, impl, attn, request):
    """``LONG_CONTEXT`` with each draft attention (its blocks of 128 are the SFA kernels' too), eagerly."""
    scenario = dataclasses.replace(LONG_CONTEXT, **FAMILY_FIELDS.get(attn, {}))
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@NEEDS_GRAPHS
@USES_FULL_GRAPHS
def test_capture_sizes_with_gaps_match_reference(device, impl, request):
    """Full graphs captured at 1 and 8 only: every batch between them is padded to 8, replayed, and
    must equal the reference."""
    scenario = dataclasses.replace(TYPICAL, graph_mode="full", capture_sizes=(1, 8))
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@USES_DRAFT_ATTN_GROUPS
def test_a_typical_serving_run_of_two_draft_attention_groups_matches_reference(device, impl, request):
    """``TYPICAL`` with a draft of two attention groups, seconds into the gate."""
    check_implementation(impl, dataclasses.replace(TYPICAL, draft_attn_groups=2), device, request.node.name)


@pytest.mark.order(0)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attn", FAMILIES)
def test_a_typical_serving_run_of_each_family_matches_reference(device, impl, attn, mode, request):
    """``TYPICAL`` with an MLA or SFA draft layer, eagerly and in each graph mode (capturing at two sizes),
    seconds into the gate."""
    sizes = None if mode == "eager" else (2, 8)
    scenario = dataclasses.replace(TYPICAL, graph_mode=mode, capture_sizes=sizes, **FAMILY_FIELDS[attn])
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@USES_KERNEL_BLOCKS
@pytest.mark.parametrize("mode", [pytest.param("eager-unpadded", id="unpadded", marks=USES_UNPADDED), *MODES])
def test_a_typical_serving_run_of_a_hybrid_targets_kernel_blocks_matches_reference(device, impl, mode, request):
    """``TYPICAL`` on a hybrid target's layout (Qwen3.5's MTP): its blocks of 8 tokens split into kernel blocks
    of 2, the runner's table of them handed on, padded in each mode and unpadded; every slot and every block
    attention reads must be what the blocks give (a drafter that indexes the table by the scheduler's block
    writes other slots, #7019)."""
    graph = mode.split("-")[0]
    sizes = None if graph == "eager" else (2, 8)
    scenario = dataclasses.replace(
        TYPICAL,
        block_size=8,
        kernel_block_size=2,
        padded=mode != "eager-unpadded",
        graph_mode=graph,
        capture_sizes=sizes,
    )
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@USES_KERNEL_BLOCKS
@pytest.mark.parametrize("mode", [m for m in MODES if m.values[0] != "piecewise"])
@pytest.mark.parametrize(
    "method",
    [
        pytest.param("eagle", marks=USES_EAGLE),
        pytest.param("eagle3", marks=USES_EAGLE3),
        pytest.param("draft_model", marks=USES_DRAFT_MODEL),
    ],
)
def test_a_typical_serving_run_of_each_method_over_kernel_blocks_matches_reference(device, impl, method, mode, request):
    """The same layout under the other drafting methods (a draft model's first pass lays its own slots out)."""
    sizes = None if mode == "eager" else (2, 8)
    scenario = dataclasses.replace(
        TYPICAL, block_size=8, kernel_block_size=2, method=method, graph_mode=mode, capture_sizes=sizes
    )
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@pytest.mark.parametrize("mode", MODES)
def test_a_typical_serving_run_on_a_decode_node_matches_reference(device, impl, mode, request):
    """``TYPICAL`` on a decode node (its prompts' KV transferred, no drafts at first), eagerly and in each
    graph mode, seconds into the gate."""
    sizes = None if mode == "eager" else (2, 8)
    scenario = dataclasses.replace(TYPICAL, graph_mode=mode, capture_sizes=sizes, decode_node=True)
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)  # graph bugs are the largest class upstream: fail them seconds in, not after every eager run
@pytest.mark.parametrize("mode", GRAPH_ONLY)
def test_a_typical_serving_run_in_graph_mode_matches_reference(device, impl, mode, request):
    """``TYPICAL`` in each graph mode, capturing at two sizes so padding to the wrong one shows: its
    batches are padded up to a captured size, replayed, and must still equal the reference."""
    scenario = dataclasses.replace(TYPICAL, graph_mode=mode, capture_sizes=(2, 8))
    check_implementation(impl, scenario, device, request.node.name)


@pytest.mark.order(0)
@pytest.mark.parametrize("mode", MODES)
def test_a_warm_up_dummy_run_before_any_call_changes_nothing(device, mode):
    """A server warms up (vLLM's profile run) with a dummy run before its first request, eager
    included; the core's proposer must run it and then serve as if it had not."""

    def warmed_up(*args, **kwargs):
        proposer = MtpProposer(*args, **kwargs)
        proposer.dummy_run(1)
        return proposer

    scenario = Scenario(num_spec_tokens=3, graph_mode=mode, requests=(RequestSpec(0, 6, 4), RequestSpec(0, 3, 4)))
    check_scenario(scenario, device, f"warm-up-{mode}", proposer_cls=warmed_up)


@pytest.mark.order(0)
@NEEDS_GRAPHS
def test_a_scenario_captures_graphs_at_its_capture_sizes(device):
    """The sizes a scenario names, in any order, are the ones its proposer captures at (each phase up
    to its buffers), and the run equals the reference, a first pass past the largest size included."""
    captured, rows = set(), []

    def seen(_report, _sim, proposer):
        captured.update(proposer.graphs)
        rows.extend(r.rows for r in proposer.trace if r.step == 1)

    scenario = Scenario(
        num_spec_tokens=2,
        max_num_reqs=2,
        token_budget=16,
        graph_mode="piecewise",
        capture_sizes=(4, 1),
        requests=(RequestSpec(0, 12, 3), RequestSpec(1, 2, 3)),
    )
    report = run_scenario(scenario, device, on_iteration=seen)
    assert report.ok, report.mismatches[:3]
    assert captured == {(FIRST, 1), (FIRST, 4), (STEP, 1)}
    assert max(rows) > 4
