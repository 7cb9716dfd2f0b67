"""The gate catches a regression in the code vllm-ascend's MRV2 speculator runs, with its divergences modelled.

Each case breaks one function (``broken_gate.VARIANTS``: a step's position not advanced, slots one
position back, 0.23.0's host lengths not advanced) and runs the gate's step check under the
generation's rules: it must fail. Without these, a modelled divergence could hide a real regression.
"""

from __future__ import annotations

import pytest

from tests.checks import core_checks
from tests.impls.suites import assert_gate_fails
from tests.impls.vllm_ascend_mrv2 import broken_gate
from tests.impls.vllm_ascend_mrv2.cases import OPS, rules

MATCH = {
    "positions-not-advanced": "positions",
    "slots-one-position-back": "slot",
    "host-seq-lens-not-advanced": "seq_lens",
}


@pytest.mark.parametrize("name", list(broken_gate.VARIANTS))
def test_a_broken_speculator_fails_the_gate(monkeypatch, device, name):
    if name not in broken_gate.variants():
        pytest.skip(f"{name} applies to vllm-ascend {broken_gate.VARIANTS[name][3]} only (broken_gate.VARIANTS)")
    broken_gate.apply(name, monkeypatch)
    assert_gate_fails(OPS.__class__(), core_checks.check_steps, rules(), device, padded=True, match=MATCH[name])
