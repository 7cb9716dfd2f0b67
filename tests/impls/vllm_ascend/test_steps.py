"""Step 4: vllm-ascend's per-step update (attn_update_stack_num_spec_norm) against the core."""

from __future__ import annotations

import pytest
from hypothesis import given

from sim.impls.vllm_ascend.divergences import RULES
from sim.oracle import reference
from tests.impls.vllm_ascend.cases import ASCEND, both
from tests.strategies.batches import batch_cases


def _steps(case, padded):
    batch, _, core, got = both(case, padded)
    accepted = core.first.accepted_seq_lens.tolist()
    start = got.first.accepted_seq_lens.tolist()
    for j in range(2, case.config.num_spec_tokens + 1):
        meta = ASCEND.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        yield j, (meta.positions.tolist(), meta.seq_lens.tolist(), meta.slot_mapping.tolist()), start, accepted


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases())
def test_steps_follow_the_ascend_rule(padded, case):
    """Every step equals vllm-ascend's modelled rule (divergences.RULES), and positions and slots equal
    the core's everywhere: the two divergences move seq_lens only."""
    for j, got, _, _ in _steps(case, padded):
        want = reference.step(case, j, padded, RULES)
        assert got == (want.positions, want.seq_lens, want.slot_mapping)
        core = reference.step(case, j)
        assert got[0] == core.positions and got[2] == core.slot_mapping


@given(case=batch_cases())
def test_padded_seq_lens_not_lowered(case):
    """padded-seq-lens-not-lowered: in padded mode step j attends to n_rej more keys than the core,
    exactly on the requests that rejected a draft (while no seq_len has passed max_model_len)."""
    mml = case.config.max_model_len
    for j, got, start, accepted in _steps(case, padded=True):
        core = reference.step(case, j)
        for r, (s, a) in enumerate(zip(start, accepted)):
            if s + j - 1 <= mml:
                assert got[1][r] - core.seq_lens[r] == s - a, (j, r)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@given(case=batch_cases(max_model_len_range=(8, 24)))
def test_overflow_seq_len_restart(padded, case):
    """overflow-seq-len-restart: a seq_len that passed max_model_len restarts at 1 and grows again; the core
    keeps 1. Where it has not passed (and padded-seq-lens-not-lowered does not apply) both agree."""
    mml = case.config.max_model_len
    for j, got, start, accepted in _steps(case, padded):
        core = reference.step(case, j)
        for r, (s, a) in enumerate(zip(start, accepted)):
            passed_at = mml - s + 2  # first step whose seq_len s + j - 1 passes max_model_len
            if j > passed_at:
                assert got[1][r] == j - passed_at + 1, (j, r)
                assert (got[1][r] != core.seq_lens[r]) == (core.seq_lens[r] == 1 or s != a), (j, r)
            elif s == a:
                assert got[1][r] == core.seq_lens[r], (j, r)


def test_a_build_not_told_its_step_is_recorded_as_the_step_the_update_says():
    """v0.21.0rc builds each draft step through the builder's ``build`` (``generation.steps_built_untold``):
    a recording builder records a ``build`` as the first pass's (step 1), inside ``building_step(j)`` as
    step ``j`` (what ``generation.tell_builders_the_step`` wraps the update in), and a capture's as no
    step's, whatever it is told."""
    from types import SimpleNamespace

    from sim.impls.vllm_ascend import builders
    from tests.impls.vllm_ascend.test_mla_builder import _step

    class Builder:
        def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
            cad = common_attn_metadata
            return SimpleNamespace(
                block_tables=cad.block_table_tensor, slot_mapping=cad.slot_mapping, seq_lens=cad.seq_lens,
                query_start_loc=cad.query_start_loc, seq_lens_list=cad.seq_lens_cpu.tolist(),
                actual_seq_lengths_q=cad.query_start_loc_cpu[1:].tolist(),
            )  # fmt: skip

        def build_for_graph_capture(self, common_attn_metadata, *args, **kwargs):
            return self.build(0, common_attn_metadata)

    recording = builders.recording(Builder)()
    assert recording.build(0, _step([5, 9])).recorded.step == 1
    with builders.building_step(3):
        assert recording.build(0, _step([6, 10])).recorded.step == 3
        assert recording.build_for_graph_capture(_step([0, 0])).recorded.step is None
    assert recording.build(0, _step([5, 9])).recorded.step == 1
