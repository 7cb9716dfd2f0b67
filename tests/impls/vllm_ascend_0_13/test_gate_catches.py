"""The gate catches a regression in 0.13.0's own code, with its divergences modelled.

Each case breaks one 0.13 method (``method_breaks``) the way upstream history broke such methods (a sample row off by
one, the first valid sampled token taken for the last, seq_lens lowered twice in prepare_inputs),
or hands ``_propose``'s step loop first-pass slots one row off (its ``slot_mapping += 1`` then
starts from the wrong slot), then runs the gate's check under ``--impl vllm_ascend_0_13``'s rules:
it must fail.
"""

from __future__ import annotations

import pytest

from sim.impls.vllm_ascend_0_13.adapter import Ascend013Ops
from sim.impls.vllm_ascend_0_13.build import mtp_proposer
from sim.impls.vllm_ascend_0_13.divergences import RULES
from sim.impls.vllm_ascend_0_13.importing import import_ascend
from sim.impls.vllm_ascend_0_13.model import MlaTinyMtp
from tests.checks import core_checks
from tests.impls.broken_kernels import FirstLapOnly
from tests.impls.suites import (
    assert_gate_fails,
    assert_serving_runs_fail_on_a_later_draft,
    later_steps_fed_rolled_hidden_rows,
)
from tests.impls.vllm_ascend_0_13.cases import both, one_decode
from tests.impls.vllm_ascend_0_13.method_breaks import (
    first_valid_token,
    sample_row_off_by_one,
    seq_lens_lowered_twice,
    slot_from_next_row,
)

BREAKS = [
    ("prepare_inputs_padded", sample_row_off_by_one, core_checks.check_first_pass, True),
    ("prepare_next_token_ids_padded", first_valid_token, core_checks.check_first_pass, True),
    ("prepare_inputs", seq_lens_lowered_twice, core_checks.check_steps, False),
]


@pytest.mark.parametrize(("method", "breaking", "check", "padded"), BREAKS, ids=[m for m, *_ in BREAKS])
def test_a_broken_0_13_fails_the_gate(monkeypatch, device, method, breaking, check, padded):
    cls = next(c for c in type(mtp_proposer(8)).__mro__ if method in vars(c))  # where it is defined
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    _gate_fails(check, padded, device)


def test_a_broken_step_slot_fails_the_gate(monkeypatch, device):
    """The first-pass slots the step loop advances from, one row off: the steps' slots are wrong."""
    from sim.impls.vllm_ascend_0_13.mla_metadata import MlaMetadataBuilder

    if not slots_advance_by_one():
        pytest.skip("slot-plus-one is fixed here: the steps look their slots up in the block table, not from the roll")
    monkeypatch.setattr(MlaMetadataBuilder, "build", slot_from_next_row(MlaMetadataBuilder.build))
    _gate_fails(core_checks.check_steps, True, device)


def test_a_kernel_that_stops_after_one_lap_fails_the_gate(monkeypatch, device):
    """0.13's ``prepare_inputs_padded_kernel`` without its grid-stride loop, on the lapping grid
    (``sim.impls.kit.kernel_grid``): the sample rows past the first lap are wrong."""
    module = import_ascend("vllm_ascend.spec_decode.eagle_proposer")
    broken = FirstLapOnly(module.prepare_inputs_padded_kernel)
    monkeypatch.setattr(module, "prepare_inputs_padded_kernel", broken)
    _gate_fails(core_checks.check_first_pass, True, device)
    assert broken.laps_cut > 0


def slots_advance_by_one() -> bool:
    """Whether 0.13's steps advance the first pass's slot (``slot-plus-one``), which this break rolls."""
    case = one_decode(num_computed=2, blocks=[7, 2, 5])  # drafts at 6, 7, 8: position 8 crosses into block 5
    batch, _, _, got = both(case, padded=True)
    step = Ascend013Ops().advance_step(
        case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, 4
    )
    return int(step.slot_mapping[0]) == 2 * case.config.block_size + 1 + 3


def _gate_fails(check, padded, device):
    assert_gate_fails(Ascend013Ops(), check, RULES, device, padded)


def test_drafts_changed_alone_fail_the_gate_beside_cross_block_writes(monkeypatch, device, impl):
    """0.13's ``slot-plus-one`` writes KV across blocks; the reference reads what the paged cache holds
    there, so the drafts of the rest of the run are still compared: a change to drafts 2..K alone
    fails a serving run."""
    monkeypatch.setattr(MlaTinyMtp, "forward", later_steps_fed_rolled_hidden_rows(MlaTinyMtp.forward))
    assert_serving_runs_fail_on_a_later_draft(impl, device, "broken-later-steps-0.13")
