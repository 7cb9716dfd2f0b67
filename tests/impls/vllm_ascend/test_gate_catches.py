"""The gate catches a regression in vllm-ascend's own code, with its divergences modelled.

Each case breaks one vllm-ascend method the way upstream history broke such
methods (a slot advanced by +1, a sample row off by one, the first valid
sampled token taken for the last), then runs the gate's check under
``--impl vllm_ascend``'s rules: it must fail. Without these, a modelled
divergence could hide a real regression.
"""

from __future__ import annotations

import functools

import pytest

from sim.impls.vllm_ascend.adapter import AscendOps
from sim.impls.vllm_ascend.build import configured
from sim.impls.vllm_ascend.divergences import HOST_READS, RULES
from sim.impls.vllm_ascend.importing import import_ascend
from sim.impls.vllm_ascend.model import AscendTinyMtp
from tests.checks import core_checks
from tests.impls.broken_kernels import FirstLapOnly
from tests.impls.suites import (
    assert_gate_fails,
    assert_serving_runs_fail_on_a_later_draft,
    later_steps_fed_rolled_hidden_rows,
)


def _slot_plus_one(original):
    @functools.wraps(original)  # keeps the signature sim.impls.vllm_ascend.generation reads
    def broken(self, *args, **kwargs):
        cad, rest = original(self, *args, **kwargs)
        cad.slot_mapping = cad.slot_mapping + (cad.slot_mapping >= 0).to(cad.slot_mapping.dtype)
        return cad, rest

    return broken


def _sample_row_off_by_one(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rows, sample, rejected = original(self, *args, **kwargs)
        return cad, rows, sample - 1, rejected

    return broken


def _first_valid_token(original):
    @functools.wraps(original)
    def broken(self, sampled, *args, **kwargs):
        ids, counts = original(self, sampled[:, :1].contiguous(), *args, **kwargs)
        return ids, counts

    return broken


BREAKS = [
    ("attn_update_stack_num_spec_norm", _slot_plus_one, core_checks.check_steps),
    ("prepare_inputs_padded", _sample_row_off_by_one, core_checks.check_first_pass),
    ("prepare_next_token_ids_padded", _first_valid_token, core_checks.check_first_pass),
]


@pytest.mark.parametrize(("method", "breaking", "check"), BREAKS, ids=[m for m, _, _ in BREAKS])
def test_a_broken_vllm_ascend_fails_the_gate(monkeypatch, device, method, breaking, check):
    cls = next(c for c in type(configured(2, 16, 64, 8)).__mro__ if method in vars(c))  # where it is defined
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    assert_gate_fails(AscendOps(), check, RULES, device, padded=True)


def test_a_kernel_that_stops_after_one_lap_fails_the_gate(monkeypatch, device):
    """``prepare_inputs_padded_kernel`` without its grid-stride loop: on the grid the adapter launches
    (every program laps, ``sim.impls.kit.kernel_grid``) the rows past the first lap are wrong, and
    steps 1-3 fail on them."""
    module = import_ascend("vllm_ascend.spec_decode.llm_base_proposer")
    broken = FirstLapOnly(module.prepare_inputs_padded_kernel)
    monkeypatch.setattr(module, "prepare_inputs_padded_kernel", broken)
    assert_gate_fails(AscendOps(), core_checks.check_first_pass, RULES, device, True, "num_rejected|sample_indices")
    assert broken.laps_cut > 0


def _reads_rejected_counts_back(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rows, sample, rejected = original(self, *args, **kwargs)
        if int(rejected.max()) > 0:  # a device sync: the padded path exists to make none
            sample = sample.clone()
        return cad, rows, sample, rejected

    return broken


def _sync_check(ops, case, padded, rules, device):
    core_checks.check_padded_path_never_syncs(ops, case, device, HOST_READS)


def test_a_device_sync_in_the_padded_path_fails_the_gate(monkeypatch, device):
    """The named host reads (``HOST_READS``) are all the padded path may read back: one more, of a
    device tensor, fails the sync property."""
    cls = next(c for c in type(configured(2, 16, 64, 8)).__mro__ if "prepare_inputs_padded" in vars(c))
    monkeypatch.setattr(cls, "prepare_inputs_padded", _reads_rejected_counts_back(cls.prepare_inputs_padded))
    match = r"host syncs: aten._local_scalar_dense at tests/impls/vllm_ascend"
    assert_gate_fails(AscendOps(), _sync_check, RULES, device, True, match)


def test_drafts_2_to_k_changed_alone_fail_the_gate_in_the_padded_path(monkeypatch, device, impl):
    """vllm-ascend's padded path carries ``padded-seq-lens-not-lowered``, modelled exactly, so drafts
    2..K are compared there: a change to them alone fails a padded serving run on a later draft."""
    monkeypatch.setattr(AscendTinyMtp, "forward", later_steps_fed_rolled_hidden_rows(AscendTinyMtp.forward))
    assert_serving_runs_fail_on_a_later_draft(impl, device, "broken-later-steps", padded=True)
