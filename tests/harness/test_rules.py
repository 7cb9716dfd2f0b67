"""The reference's rules for documented divergences (``sim.oracle.rules``), on hand-worked steps.

max_model_len 10; the last accepted position is 8 (seq_len 9) unless stated.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from mtp.trace import Phase
from sim.oracle.rules import CORE, Rules

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

# The overflow behaviours of the implementations under test, as the two axes combine them.
VLLM_V1 = Rules(overflow_position="restart", overflow_seq_len="with-position")
ASCEND = Rules(overflow_seq_len="own-restart")
ASCEND_0_13 = Rules(overflow_position="restart", overflow_seq_len="own-restart")
MRV2 = Rules(overflow_position="clamp", overflow_seq_len="clamp")

M = 10


def _steps(rules: Rules, last_pos: int, base: int, k: int = 4):
    return [rules.step(last_pos, base, j, M) for j in range(2, k + 1)]


def test_core_masks_every_overflowing_step():
    assert _steps(CORE, 8, 9) == [(9, 10, True), (0, 1, False), (0, 1, False)]


def test_restart_continues_from_position_zero_with_real_slots():
    assert _steps(VLLM_V1, 8, 9) == [(9, 10, True), (0, 1, False), (1, 2, True)]


def test_seq_len_restart_masks_positions_but_counts_seq_len_on():
    rules = ASCEND
    assert _steps(rules, 8, 9) == [(9, 10, True), (0, 1, False), (0, 2, False)]
    # Not lowered by 2 rejected tokens: seq_len passes max_model_len while the position is valid.
    assert _steps(rules, 6, 9) == [(7, 10, True), (8, 1, True), (9, 2, True)]


def test_padded_base():
    lowered, not_lowered = CORE, Rules(padded_seq_lens_lowered=False)
    assert lowered.step_seq_base(9, 7, padded=True) == 7 and not_lowered.step_seq_base(9, 7, padded=True) == 9
    assert not_lowered.step_seq_base(9, 7, padded=False) == 7


@pytest.mark.parametrize("field", ["overflow_position", "overflow_seq_len"])
def test_unknown_overflow_rule_is_named(field):
    with pytest.raises(ValueError, match=f"{field}='wrap'"):
        Rules(**{field: "wrap"})


def test_the_overflow_axes_are_independent():
    """A seq_len rule combines with any position rule: the position's restart keeps its KV writes
    whatever seq_len does, and a clamped seq_len beside the design's zeroed position."""
    mixed = Rules(overflow_position="zero", overflow_seq_len="clamp")
    assert _steps(mixed, 8, 9) == [(9, 10, True), (0, 10, False), (0, 10, False)]
    assert [s[2] for s in _steps(ASCEND_0_13, 8, 9)] == [s[2] for s in _steps(VLLM_V1, 8, 9)]


def test_position_restart_continues_positions_and_counts_seq_len_on():
    rules = ASCEND_0_13
    assert _steps(rules, 8, 9) == [(9, 10, True), (0, 1, False), (1, 2, True)]
    # Not lowered by 2 rejected tokens: seq_len passes max_model_len while the position is valid.
    assert _steps(rules, 6, 9) == [(7, 10, True), (8, 1, True), (9, 2, True)]


def test_plus_one_slots_advance_from_the_last_accepted_slot():
    table = {p: 100 + p for p in range(12)}  # the block table's slot of each position
    lookup = table.__getitem__
    plus_one = dataclasses.replace(ASCEND_0_13, slots_from_block_table=False)
    assert [plus_one.step_slot(lambda p: 40 + p, 6, j, M) for j in (2, 3, 4)] == [47, 48, 49]
    assert [CORE.step_slot(lookup, 6, j, M) for j in (2, 3, 4)] == [107, 108, 109]
    # Overflow at step 3 (position 10): -1, then -1 + 1 = 0 at the restarted position 1.
    assert [plus_one.step_slot(lookup, 8, j, M) for j in (2, 3, 4)] == [109, -1, 0]
    assert [VLLM_V1.step_slot(lookup, 8, j, M) for j in (2, 3, 4)] == [109, -1, 101]


def test_prefill_batches_draft_once():
    from sim.oracle.cases import BatchCase, RequestCase

    def case(*reqs):
        return BatchCase(None, [RequestCase([0], c, q, d, [], False, [0]) for c, q, d in reqs], seed=0)

    once = Rules(prefill_batches_draft_once=True)
    assert once.first_draft_repeated(case((0, 5, 0)))  # no context anywhere: a prefill
    assert not once.first_draft_repeated(case((4, 3, 2), (7, 4, 3)))  # every query: one token plus its drafts
    assert not once.first_draft_repeated(case((4, 1, 0), (0, 1, 0)))  # every query one token
    assert once.first_draft_repeated(case((4, 3, 2), (6, 5, 0)))  # a chunk of a prompt among decodes
    assert not CORE.first_draft_repeated(case((0, 5, 0)))


def test_clamp_holds_position_and_seq_len_at_the_last_in_range_values_and_writes_kv():
    assert _steps(MRV2, 8, 9) == [(9, 10, True), (9, 10, True), (9, 10, True)]
    table = {p: 100 + p for p in range(12)}.__getitem__
    assert [MRV2.step_slot(table, 8, j, M) for j in (2, 3, 4)] == [109, 109, 109]


def test_stale_rejected_rows_are_the_rows_after_each_sample_row():
    qsl, sample = [0, 4, 5, 9], [1, 4, 8]  # request 0 rejected two rows, request 1 is one row, request 2 none
    assert Rules(stale_rejected_rows=True).unwritten_first_pass_rows(qsl, sample) == {2, 3}
    assert CORE.unwritten_first_pass_rows(qsl, sample) == set()


def test_the_computed_count_of_a_draft_step():
    """A decode with 2 drafts, both accepted, seq_len 8 (5 tokens in KV, query length 3): step 2 attends
    to 9 (the 8 accepted and draft 1), 8 of them before its one-token query; vllm-ascend's drift keeps
    the first pass's 5 and advances it by one a step, 6."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=2, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=8,
                         max_num_reqs=4, hidden_size=8)  # fmt: skip
    case = BatchCase(cfg, [RequestCase([1, 2, 3, 4], 5, 3, 2, [1, 2, 3], False, [7, 2, 5])], seed=0)
    drift = Rules(num_computed_from_first_pass=True)
    assert reference.num_computed(case, 1) == reference.num_computed(case, 1, rules=drift) == [5]
    assert reference.num_computed(case, 2) == [8] and reference.num_computed(case, 2, rules=drift) == [6]


def test_the_state_of_two_draft_groups_advances_twice_per_step():
    """vllm-ascend's ``draft-state-advanced-per-group`` with two groups: step j gets step 1 + 2(j-1)'s
    seq_len, slot position and computed count, its own position. A decode that accepted both of its 2
    drafts (seq_len 8, position 7 last, blocks of 4): step 2 attends to 10 keys, not 9, and writes its
    KV at position 9's slot, not 8's; with one group, or without the rule, nothing changes."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=2, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=8,
                         max_num_reqs=4, hidden_size=8)  # fmt: skip
    case = BatchCase(cfg, [RequestCase([1, 2, 3, 4], 5, 3, 2, [1, 2, 3], False, [7, 2, 5])], seed=0)
    advanced = Rules(state_advances_per_group=True, draft_attn_groups=2, num_computed_from_first_pass=True)
    assert [advanced.state_step(j) for j in (1, 2, 3)] == [1, 3, 5]
    assert dataclasses.replace(advanced, draft_attn_groups=1).state_step(3) == 3
    assert Rules(draft_attn_groups=2).state_step(3) == 3  # the configuration alone decides nothing
    spec, got = reference.step(case, 2), reference.step(case, 2, rules=advanced)
    assert (spec.positions, spec.seq_lens, spec.slot_mapping) == ([8], [9], [20])  # block 5, offset 0
    assert (got.positions, got.seq_lens, got.slot_mapping) == ([8], [10], [21])
    assert reference.num_computed(case, 2, rules=advanced) == [7]  # 5 at the first pass, advanced twice


def test_a_slot_past_the_row_is_the_one_the_minus_one_entry_gives():
    """A state run ahead of its position looks a block up past its row: the table holds -1 there."""
    from sim.oracle.reference import table_slot

    assert table_slot([3, 7], 5, 4) == 7 * 4 + 1
    assert table_slot([3, 7], 9, 4) == -4 + 1


def test_draft_attn_groups_is_at_least_one():
    with pytest.raises(ValueError, match="draft_attn_groups=0"):
        Rules(draft_attn_groups=0)


def test_the_batch_bound_is_over_the_lengths_the_steps_advance_from():
    """vllm-ascend main's ``draft-seq-lens-batch-bound``: every request attends to the batch's bound,
    the largest host length + K. The bound is over the lengths the host-length rule leaves: a decode of
    3 drafts that accepted 1 (seq_len 14, 2 rejected) is bounded by 14 + 3 where the host lengths are
    never lowered (``host-seq-lens-not-lowered``), by 12 + 3 where they are (that defect fixed alone)."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=3, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=64,
                         max_num_reqs=4, hidden_size=32)  # fmt: skip
    req = RequestCase([20, 21, 22, 23, 24], 10, 4, 3, [11, 12, -1, -1], False, [3, 1, 4, 0, 2])
    case = BatchCase(cfg, [req], seed=0)
    bound = Rules(step_seq_lens="batch-bound")
    assert reference.step(case, 2, rules=bound).seq_lens == [15]  # lowered: 12 + 3
    assert reference.step(case, 2, rules=dataclasses.replace(bound, padded_seq_lens_lowered=False)).seq_lens == [17]
    assert reference.step(case, 2).seq_lens == [13]  # the spec: 12 + 2 - 1


def test_an_mla_draft_rotates_at_the_last_steps_positions_under_the_shared_cos_sin():
    """vllm-ascend's ``mla-draft-cos-sin-shared`` with K = 3: two decodes (4 rows each, all accepted:
    last positions 7 and 13) and a 6-token prefill after them (last position 5). Steps 2 and 3 are at
    8, 14, 6 and 9, 15, 7; every call but the last rotates its decode rows at step 3's, the first pass its
    first three rows only (B = 3, the prefill's request among them), which are request 0's; the
    prefill's rows and the last step keep their own. A GQA draft, or K = 1, changes nothing."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=3, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=64,
                         max_num_reqs=4, hidden_size=32)  # fmt: skip
    decodes = [RequestCase([1, 2, 3, 4], c, 4, 3, [1, 2, 3, 4], False, [0, 1, 2, 3]) for c in (4, 10)]
    prefill = RequestCase([5] * 6, 0, 6, 0, [5, -1, -1, -1], False, [4, 5])
    case = BatchCase(cfg, [*decodes, prefill], seed=0)
    shared = Rules(rope_from_last_build=True, draft_attn="mla")
    own = [4, 5, 6, 7, 10, 11, 12, 13, 0, 1, 2, 3, 4, 5]
    assert reference.rope_positions(case, 1) == own
    assert reference.rope_positions(case, 1, rules=shared) == [9, 15, 7, *own[3:]]
    assert reference.rope_positions(case, 2) == [8, 14, 6] and reference.rope_positions(case, 3) == [9, 15, 7]
    assert reference.rope_positions(case, 2, rules=shared) == [9, 15, 7]
    assert reference.rope_positions(case, 3, rules=shared) == [9, 15, 7]
    assert reference.rope_positions(case, 1, rules=dataclasses.replace(shared, draft_attn="gqa")) == own
    one = BatchCase(dataclasses.replace(cfg, num_spec_tokens=1), case.requests, seed=0)
    assert reference.rope_positions(one, 1, rules=shared) == reference.rope_positions(one, 1)


def test_an_sfa_builder_sharing_the_cos_sin_buffer_rotates_the_first_rows_at_the_last_build():
    """v0.21.0rc's ``sfa-draft-cos-sin-shared`` (``Rules.sfa_rope_from_last_build``) with K = 3 on a prefill
    of 6 rows before two decodes of 4 (last positions 7, 9 and 15): every build writes all its rows, so
    the first pass's first B = 3 rows, the prefill's, rotate at the last step's positions and steps 2..3
    at the last step's; an MLA draft's rule (decode rows before the first prefill) rotates none of the
    first pass's rows here, and an MLA draft under the SFA rule, or a GQA draft, keeps its own."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=3, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=64,
                         max_num_reqs=4, hidden_size=32)  # fmt: skip
    decodes = [RequestCase([1, 2, 3, 4], c, 4, 3, [1, 2, 3, 4], False, [0, 1, 2, 3]) for c in (4, 10)]
    prefill = RequestCase([5] * 6, 0, 6, 0, [5, -1, -1, -1], False, [4, 5])
    case = BatchCase(cfg, [prefill, *decodes], seed=0)
    own = [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 10, 11, 12, 13]
    assert reference.rope_positions(case, 1) == own and reference.rope_positions(case, 3) == [7, 9, 15]
    sfa = Rules(sfa_rope_from_last_build=True, draft_attn="sfa")
    assert reference.rope_positions(case, 1, rules=sfa) == [7, 9, 15, *own[3:]]
    assert reference.rope_positions(case, 2, rules=sfa) == [7, 9, 15]
    assert reference.rope_positions(case, 1, rules=Rules(rope_from_last_build=True, draft_attn="mla")) == own
    for other in ("mla", "gqa"):
        assert reference.rope_positions(case, 1, rules=dataclasses.replace(sfa, draft_attn=other)) == own


def test_the_draft_attention_family_is_named():
    with pytest.raises(ValueError, match="draft_attn='gdn'"):
        Rules(draft_attn="gdn")


def test_sfa_graph_steps_replay_the_first_pass():
    """vllm-ascend's ``sfa-graph-steps-replay-the-first-pass`` with K = 3 on two decodes (4 rows each, all
    accepted: last positions 7 and 13): in a replayed call steps 2 and 3 rotate rows 0 and 1 at the
    first pass's rows 0 and 1 (positions 4, 5), and with the lengths rule read the first pass's query
    offsets and key lengths; a call that does not replay a graph (``for_call(False)``), a GQA draft,
    or the spec keep each step's own."""
    from mtp.config import ProposerConfig
    from sim.oracle import reference
    from sim.oracle.cases import BatchCase, RequestCase

    cfg = ProposerConfig(num_spec_tokens=3, vocab_size=96, block_size=4, max_model_len=64, max_num_tokens=64,
                         max_num_reqs=4, hidden_size=32)  # fmt: skip
    decodes = [RequestCase([1, 2, 3, 4], c, 4, 3, [1, 2, 3, 4], False, [0, 1, 2, 3]) for c in (4, 10)]
    case = BatchCase(cfg, decodes, seed=0)
    replayed = Rules(graph_steps_rope_of_first_pass=True, graph_steps_lengths_of_first_pass=True, draft_attn="sfa")
    first = reference.first_pass(case, True, replayed)
    assert reference.rope_positions(case, 2) == [8, 14] and reference.step(case, 2).seq_lens == [9, 15]
    assert reference.rope_positions(case, 2, rules=replayed) == reference.rope_positions(case, 3, rules=replayed)
    assert reference.rope_positions(case, 3, rules=replayed) == [4, 5]
    step = reference.step(case, 3, rules=replayed)
    assert (step.seq_lens, step.query_start_loc) == (first.seq_lens, first.query_start_loc) == ([8, 14], [0, 4, 8])
    assert (
        step.positions == reference.step(case, 3).positions
        and step.slot_mapping == reference.step(case, 3).slot_mapping
    )
    not_replayed = replayed.for_call(lambda: False)
    for other in (not_replayed, dataclasses.replace(replayed, draft_attn="gqa"), Rules(draft_attn="sfa")):
        assert reference.rope_positions(case, 3, rules=other) == [9, 15]
        assert reference.step(case, 3, rules=other).query_start_loc == [0, 1, 2]
    assert replayed.for_call(lambda: True) is replayed
    assert Rules().for_call(lambda: pytest.fail("asked where no rule holds only in graphs")) == Rules()


def test_step_lengths_of_steps_replayed_from_a_graph_of_their_own():
    """vllm-ascend main's MRV2 ``draft-seq-lens-batch-bound`` (``step_seq_lens='batch-bound'``) with its graph
    lengths (``step_seq_lens_in_graphs='advance'``): a call whose draft steps replay a step graph is held to
    each request's own lengths, one whose steps run eagerly to the batch's bound; the question is asked only
    where the rules hold such a rule, and a value that names no rule is refused."""
    from sim.oracle.compare import steps_replay_graph
    from sim.oracle.rules import STEP_SEQ_LENS

    bound = Rules(step_seq_lens="batch-bound", step_seq_lens_in_graphs="advance")
    assert bound.for_call(lambda: False, lambda: True).step_seq_lens == "advance"
    assert bound.for_call(lambda: False, lambda: False).step_seq_lens == "batch-bound"
    assert Rules().for_call(lambda: False, lambda: pytest.fail("asked where no rule holds for step graphs")) == Rules()
    with pytest.raises(ValueError, match="step_seq_lens_in_graphs='twice'"):
        Rules(step_seq_lens_in_graphs="twice")
    assert "advance" in STEP_SEQ_LENS
    requests = SimpleNamespace(requests=[object()] * 3)
    assert steps_replay_graph(requests, {Phase.STEP: [2, 4]}) and not steps_replay_graph(requests, {Phase.STEP: [2]})
    assert not steps_replay_graph(requests, {Phase.FIRST: [8]}) and not steps_replay_graph(requests, None)
