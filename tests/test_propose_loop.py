"""The full propose loop on a simulated serving run equals the from-scratch reference.

Every draft token (margin-aware) and every piece of per-step metadata, over
multi-iteration scenarios with prefills, partial prefills, decodes, requests
leaving, block reuse and max_model_len overflow.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings

from tests.e2e_checks import check_scenario
from tests.strategies.scenarios import scenarios

E2E = settings(max_examples=max(100, settings.default.max_examples // 2))


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@E2E
@given(scenario=scenarios())
def test_drafts_and_metadata_match_reference(device, padded, scenario, request):
    scenario = type(scenario)(**{**scenario.__dict__, "padded": padded})
    report = check_scenario(scenario, device, request.node.name)
    for feature in report.features:
        event(feature)
