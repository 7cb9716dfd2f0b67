"""M-RoPE, eagle, eagle3 and draft_model on whole serving runs equal the from-scratch reference.

M-RoPE: prompts hold an image (``sim.models.mrope``), so the three rows
differ and text after the image is offset from its sequence position; every
model call's three rows are compared with the reference, and the drafts
with drafts computed from scratch by a model that rotates by the three rows.
eagle (EAGLE-1): the drafts of mtp, through an implementation's EAGLE paths (its draft class, its
method's branches). eagle3: the target hands three layers, combined before the first pass only.
draft_model: a language model of its own on the token ids, whose first pass adds each request's next
token as a row of its own.
Each path runs padded and unpadded, eagerly and in each graph mode, under every implementation
that has it (the ``uses`` marks: vLLM's and vllm-ascend's drafters run eagle and eagle3).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given

from mtp.config import ProposerConfig
from mtp.proposer import MtpProposer
from sim.models.mrope import mrope_rows
from sim.oracle.cases import to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.checks.e2e_checks import check_implementation
from tests.checks.example_budget import share
from tests.checks.modes import MODES, PADDING, USES_DRAFT_MODEL, USES_EAGLE, USES_EAGLE3, USES_MROPE
from tests.strategies.scenarios import scenarios

pytestmark = pytest.mark.order(2)  # whole serving runs: after the single-call properties

PATHS = share(12 * len(MODES) * len(PADDING), at_least=3)  # a twelfth of the profile's examples per path
VARIANTS = {
    "mrope": {"mrope": True},
    "eagle": {"method": "eagle"},
    "eagle3": {"method": "eagle3"},
    "both": {"mrope": True, "method": "eagle3"},
    "draft_model": {"method": "draft_model"},
}
USES = {
    "mrope": [USES_MROPE],
    "eagle": [USES_EAGLE],
    "eagle3": [USES_EAGLE3],
    "both": [USES_MROPE, USES_EAGLE3],
    "draft_model": [USES_DRAFT_MODEL],
}
PATH_PARAMS = [pytest.param(path, marks=USES[path]) for path in VARIANTS]


def _check(device, impl, scenario, name):
    check_implementation(impl, scenario, device, name)


# Two image prompts and a text one, decodes crossing blocks, real verification.
SMALL = Scenario(
    seed=5,
    num_spec_tokens=3,
    block_size=2,
    token_budget=24,
    accept="greedy",
    max_iterations=12,
    requests=(RequestSpec(0, 30, 8), RequestSpec(0, 12, 8), RequestSpec(1, 5, 8)),
)


@pytest.mark.order(0)  # one fixed serving run per path: beside the other fixed runs
@pytest.mark.parametrize("path", PATH_PARAMS)
def test_a_case_every_broken_variant_fails_matches_reference(device, impl, path):
    """``SMALL`` fails on every broken variant of tests/meta/broken_paths.py: one serving run per path, run
    early, so a broken path fails within seconds, before the property below draws (and shrinks) scenarios."""
    _check(device, impl, dataclasses.replace(SMALL, **VARIANTS[path]), f"small-{path}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padded", PADDING)
@pytest.mark.parametrize("path", PATH_PARAMS)
@PATHS
@given(scenario=scenarios())
def test_path_matches_reference(device, impl, path, padded, mode, scenario, request):
    """Drafts (margin-aware) and every call's metadata, M-RoPE rows included."""
    scenario = dataclasses.replace(scenario, padded=padded, graph_mode=mode, **VARIANTS[path])
    _check(device, impl, scenario, request.node.name)


def test_image_rows_differ_and_text_is_offset():
    rows = mrope_rows(30, 5, range(40))
    assert len({tuple(r) for r in rows}) == 3, "an image prompt must give three different rows"
    assert rows[0][-1] == rows[1][-1] == rows[2][-1] < 39, "text after an image is offset, all rows equal"


def _call(scenario: Scenario, device, **batch_fields):
    model, target = build_models(scenario, device.torch_device)
    sim = ServingSim(scenario, target)
    proposer = MtpProposer(sim.config, model, device)
    it = sim.step(0)
    batch, sampled = to_batch(it.case, device.torch_device, scenario.padded, it.hidden.to(device.torch_device))
    return proposer, dataclasses.replace(batch, **batch_fields), sampled


def test_mrope_rows_missing_or_unwanted_are_refused(device):
    proposer, batch, sampled = _call(dataclasses.replace(SMALL, mrope=True), device, mrope_positions=None)
    with pytest.raises(ValueError, match=r"mrope_positions\.shape=None"):
        proposer.propose(batch, sampled)
    proposer, batch, sampled = _call(SMALL, device)
    rows = torch.zeros(3, batch.num_tokens, dtype=torch.int64, device=device.torch_device)
    with pytest.raises(ValueError, match=r"mrope_positions\.shape=\(3, \d+\): given, but"):
        proposer.propose(dataclasses.replace(batch, mrope_positions=rows), sampled)


def test_eagle3_needs_the_auxiliary_width(device):
    proposer, batch, sampled = _call(dataclasses.replace(SMALL, method="eagle3"), device)
    narrow = batch.hidden_states[:, : SMALL.hidden_size]
    with pytest.raises(ValueError, match=r"hidden_states\.shape=\(\d+, 32\): expected \(\d+, 96\)"):
        proposer.propose(dataclasses.replace(batch, hidden_states=narrow), sampled)


def test_draft_model_needs_room_for_its_extra_rows(device):
    """A draft model's first pass adds a row per request: a batch that fills the buffers without that room
    is refused, naming the field; the proposer stays usable."""
    scenario = dataclasses.replace(SMALL, method="draft_model")
    proposer, batch, sampled = _call(scenario, device)
    tight = dataclasses.replace(proposer.cfg, max_num_tokens=batch.num_tokens + batch.num_reqs - 1)
    narrow = MtpProposer(tight, proposer.model, device)
    with pytest.raises(
        ValueError, match=r"num_tokens=\d+: the first pass of method 'draft_model' adds a row per request"
    ):
        narrow.propose(batch, sampled)
    assert proposer.propose(batch, sampled).shape == (batch.num_reqs, scenario.num_spec_tokens)


def test_bad_method_is_refused():
    with pytest.raises(ValueError, match="method='medusa'"):
        ProposerConfig(3, 96, 4, 96, 64, 8, method="medusa")
    with pytest.raises(ValueError, match="method='medusa'"):
        Scenario(method="medusa")
    with pytest.raises(ValueError, match="uses_mrope=True: method 'draft_model'"):
        ProposerConfig(3, 96, 4, 96, 64, 8, uses_mrope=True, method="draft_model")
    with pytest.raises(ValueError, match="mrope=True: method 'draft_model'"):
        Scenario(method="draft_model", mrope=True)


def test_old_replay_files_load_with_the_new_fields_off():
    data = dataclasses.asdict(SMALL)
    del data["mrope"], data["method"]
    loaded = Scenario.from_dict(data | {"requests": [dataclasses.asdict(r) for r in SMALL.requests]})
    assert (loaded.mrope, loaded.method) == (False, "mtp")
