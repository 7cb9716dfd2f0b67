"""The gate catches a regression in vllm-ascend's own code, with its divergences modelled.

Each case breaks one vllm-ascend method the way upstream history broke such
methods (a slot advanced by +1, a sample row off by one, the first valid
sampled token taken for the last), then runs the gate's check under
``--impl vllm_ascend``'s rules: it must fail. Without these, a modelled
divergence could hide a real regression.
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.vllm_ascend import generation
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.impls.vllm_ascend.branch_divergences import in_force
from sim.impls.vllm_ascend.build import configured
from sim.impls.vllm_ascend.divergences import RULES
from sim.impls.vllm_ascend.model import AscendTinyMtp
from tests.checks import core_checks
from tests.checks.e2e_checks import check_implementation
from tests.impls.broken_kernels import FirstLapOnly
from tests.impls.fixes import defining_class
from tests.impls.suites import (
    assert_gate_fails,
    assert_serving_runs_fail,
    assert_serving_runs_fail_on_a_later_draft,
    later_steps_fed_rolled_hidden_rows,
)
from tests.impls.vllm_ascend.method_breaks import (
    first_valid_token,
    kernel_blocks_indexed_by_the_block_size,
    outputs_swapped,
    reads_rejected_counts_back,
    sample_row_off_by_one,
    slot_plus_one,
)
from tests.properties.test_propose_loop import TYPICAL

BREAKS = [
    ("attn_update_stack_num_spec_norm", slot_plus_one, core_checks.check_steps),
    ("prepare_inputs_padded", sample_row_off_by_one, core_checks.check_first_pass),
    ("prepare_next_token_ids_padded", first_valid_token, core_checks.check_first_pass),
]


@pytest.mark.parametrize(("method", "breaking", "check"), BREAKS, ids=[m for m, _, _ in BREAKS])
def test_a_broken_vllm_ascend_fails_the_gate(monkeypatch, device, method, breaking, check):
    cls = defining_class(configured(2, 16, 64, 8), method)
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    assert_gate_fails(AscendOps(), check, RULES, device, padded=True)


def test_a_kernel_that_stops_after_one_lap_fails_the_gate(monkeypatch, device):
    """``prepare_inputs_padded_kernel`` without its grid-stride loop: on the grid the adapter launches
    (every program laps, ``sim.impls.kit.kernel_grid``) the rows past the first lap are wrong, and
    steps 1-3 fail on them."""
    module = generation.base_module()
    broken = FirstLapOnly(module.prepare_inputs_padded_kernel)
    monkeypatch.setattr(module, "prepare_inputs_padded_kernel", broken)
    assert_gate_fails(AscendOps(), core_checks.check_first_pass, RULES, device, True, "num_rejected|sample_indices")
    assert broken.laps_cut > 0


def _sync_check(ops, case, padded, rules, device):
    core_checks.check_padded_path_never_syncs(ops, case, device, in_force(generation.name()).HOST_READS)


def test_a_device_sync_in_the_padded_path_fails_the_gate(monkeypatch, device):
    """The named host reads (``HOST_READS``) are all the padded path may read back: one more, of a
    device tensor, fails the sync property."""
    cls = defining_class(configured(2, 16, 64, 8), "prepare_inputs_padded")
    monkeypatch.setattr(cls, "prepare_inputs_padded", reads_rejected_counts_back(cls.prepare_inputs_padded))
    match = r"host syncs: aten._local_scalar_dense at tests/impls/vllm_ascend"
    assert_gate_fails(AscendOps(), _sync_check, RULES, device, True, match)


def test_drafts_2_to_k_changed_alone_fail_the_gate_in_the_padded_path(monkeypatch, device, impl):
    """vllm-ascend's padded path carries ``padded-seq-lens-not-lowered``, modelled exactly, so drafts
    2..K are compared there: a change to them alone fails a padded serving run on a later draft."""
    monkeypatch.setattr(AscendTinyMtp, "forward", later_steps_fed_rolled_hidden_rows(AscendTinyMtp.forward))
    assert_serving_runs_fail_on_a_later_draft(impl, device, "broken-later-steps", padded=True)


def test_the_draft_models_two_outputs_swapped_fail_the_gate(monkeypatch, device, impl):
    """The draft model returns the state to compute logits from and the state to feed back, and they
    differ (``sim.impls.kit.vllm_model.logit_view``): a vllm-ascend that exchanges them drafts other tokens
    from the first draft on."""
    proposer = configured(2, 16, 64, 8)
    if not proposer.model_returns_tuple():
        pytest.skip("this generation's MTP drafter takes one state from its model (v0.21.0rc, v0.22.1rc): none to swap")
    cls = defining_class(proposer, "maybe_all_gather_and_unpad")
    monkeypatch.setattr(cls, "maybe_all_gather_and_unpad", outputs_swapped(cls.maybe_all_gather_and_unpad))
    assert_serving_runs_fail(impl, device, "broken-outputs-swapped", r"draft 1")


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_kernel_blocks_indexed_by_the_block_size_fail_the_gate(monkeypatch, device, impl, padded):
    """A hybrid target's runner hands a table of kernel blocks (``kernel_blocks``): a drafter that looks each
    draft step's slot up in it by the scheduler's block size (``has_gdn`` false, or before vllm-ascend #7019)
    writes and reads another block's slots, past the cache here."""
    cls = defining_class(configured(2, 16, 64, 8), "attn_update_stack_num_spec_norm")
    update = kernel_blocks_indexed_by_the_block_size(cls.attn_update_stack_num_spec_norm)
    monkeypatch.setattr(cls, "attn_update_stack_num_spec_norm", update)
    hybrid = dataclasses.replace(TYPICAL, block_size=8, kernel_block_size=2, padded=padded)
    with pytest.raises((AssertionError, IndexError), match=r"step [2-9]|KV cache slot \d+ is past the cache"):
        check_implementation(impl, hybrid, device, "broken-kernel-blocks")


def test_a_drafter_whose_model_returns_one_state_drafts_the_reference(monkeypatch, device, impl):
    """v0.21.0rc and v0.22.1rc's MTP drafter takes one state from its model (``model_returns_tuple()``
    False: vLLM 0.22's ``DeepSeekMTP``), logits and feedback alike; the tiny draft then returns that one
    state (``VllmTinyMtp.returns_tuple``). This generation's drafter asked so drafts the reference."""
    cls = defining_class(configured(2, 16, 64, 8), "model_returns_tuple")
    monkeypatch.setattr(cls, "model_returns_tuple", lambda self: False)
    check_implementation(impl, TYPICAL, device, "one-state-draft-model")
