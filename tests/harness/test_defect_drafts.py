"""The defect model (``sim.oracle.defect_drafts``) is exact: on the core with the defect put in, and on
the core itself.

- The core with ``tests/meta/broken_ops.py:PaddedSeqLensNotLowered`` is vllm-ascend's
  ``padded-seq-lens-not-lowered`` on the core: under ``Rules(padded_seq_lens_lowered=False)`` its padded
  serving runs draft exactly what the model says, drafts 2..K included, on a NaN-poisoned cache (where
  reads past seq_len are often undefined) and on one of stale zeros (where they never are).
- ``SlotPlusOne`` is 0.13's ``slot-plus-one``: under ``Rules(slots_from_block_table=False)`` its runs,
  both modes, draft what the model says, across calls too (the slots earlier calls clobbered are read
  from the cache as it was before the call).
- Under the core's own rules the model, forced on, gives ``reference_drafts``' drafts.

tests/meta/test_broken_caught.py shows the same broken cores failing under the core's rules, and a
variant that differs from the defect in drafts 2..K only caught under the defect's rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
from unittest import mock

import pytest
from hypothesis import event, given, reject

from sim.oracle import compare
from sim.oracle.rules import CORE, Rules
from sim.serving import checker
from sim.serving.run import run_scenario
from sim.serving.scenario import default_scenario
from tests.checks.example_budget import share
from tests.meta.broken_ops import PaddedSeqLensNotLowered, SlotPlusOne
from tests.strategies.scenarios import scenarios

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

NOT_LOWERED = Rules(padded_seq_lens_lowered=False)
PLUS_ONE = Rules(slots_from_block_table=False)
# The core caps its attention's host bound at max_model_len; under the rules' "mask" overflow an unlowered
# seq_len passes it while the position is valid. Metadata, not drafts: no key past max_model_len exists.
BOUND = "seq_len_bound"


def wrong_drafts(report) -> list:
    return [m for m in report.mismatches if m.what.startswith("draft")]


def _events(report) -> None:
    event(f"drafts 2..K compared: {report.drafts_compared > report.proposals}")
    event(f"drafts undefined: {report.drafts_undefined > 0}")


# Whole runs, 0.2 to 2 s each: a tenth of the profile's examples for the not-lowered property, the
# property this module is about; a twentieth for the others.
@pytest.mark.parametrize("poison_kv", [True, False], ids=["nan-cache", "zero-cache"])
@share(10)
@given(scenario=scenarios(padded=True))
def test_broken_core_drafts_what_the_not_lowered_model_says(device, poison_kv, scenario):
    report = run_scenario(
        scenario,
        device,
        ops=PaddedSeqLensNotLowered(),
        rules=NOT_LOWERED,
        stop_at_first_mismatch=False,
        poison_kv=poison_kv,
    )
    assert not wrong_drafts(report), f"wrong drafts: {wrong_drafts(report)[0]}"
    assert all(BOUND in m.what for m in report.mismatches), str(report.mismatches[0])
    if not poison_kv:
        assert report.drafts_undefined == 0, "a stale-zero cache holds no undefined key"
    _events(report)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@share(20)
@given(scenario=scenarios())
def test_broken_core_drafts_what_the_plus_one_model_says(device, padded, scenario):
    try:
        report = run_scenario(
            dataclasses.replace(scenario, padded=padded),
            device,
            ops=SlotPlusOne(),
            rules=PLUS_ONE,
            stop_at_first_mismatch=False,
        )
    except IndexError:
        reject()  # a slot pushed past the cache's last block: the write crashes (tests/meta/test_broken_caught.py)
    assert report.ok, f"mismatches: {report.mismatches[0]}"
    _events(report)


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@share(20)
@given(scenario=scenarios())
def test_the_model_under_the_core_rules_is_the_reference(device, padded, scenario):
    """Forced on where no defect is, the model reads the dense prefix and the call's own drafts only."""
    forced = (mock.patch.object(module, "is_modelled", lambda rules, padded: True) for module in (compare, checker))
    with contextlib.ExitStack() as stack:
        for patch in forced:
            stack.enter_context(patch)
        report = run_scenario(dataclasses.replace(scenario, padded=padded), device, rules=CORE)
    assert report.ok, f"mismatches: {report.mismatches[0]}"
    assert report.drafts_undefined == 0, "the core reads no key it did not define"


def test_drafts_two_to_k_are_compared_under_the_defect(device):
    """Padded, every draft rejected or not at random: more drafts compared than requests drafted for (draft 1 only: at most as many)."""
    scenario = default_scenario(0, num_requests=6, padded=True)
    report = run_scenario(
        scenario, device, ops=PaddedSeqLensNotLowered(), rules=NOT_LOWERED, stop_at_first_mismatch=False
    )
    assert not wrong_drafts(report)
    assert report.drafts_compared > report.proposals, (report.drafts_compared, report.proposals)  # draft 1 only: <=
    assert report.drafts_undefined > 0, "NaN past seq_len: some drafts read a key nobody wrote"


def test_reported_ids_never_report_an_id_marked_minus_one():
    """``Rules.sample_report`` with -1 for the ids a sampler never reports (another TP rank's columns): the
    argmax is that of the ids it reports, under their reported ids."""
    import torch

    from sim.oracle.reference_drafts import reported_logits

    logits = torch.tensor([[0.1, 0.9, 0.3, 0.5], [0.8, 0.2, 0.4, 0.1]])
    own_columns = (-1, -1, 0, 1)  # the second rank's slice of 4 ids, reported as indices into it
    assert reported_logits(logits, own_columns)[:, :2].argmax(dim=-1).tolist() == [1, 0]
    assert torch.isinf(reported_logits(logits, own_columns)[:, 2:]).all()
    assert reported_logits(logits, (0, 1, 2, 3)).tolist() == logits.tolist()
