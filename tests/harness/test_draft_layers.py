"""A draft of several attention layers (``TinyMtp.forward_layers``) and the scenarios that ask for one.

Two layers given the same metadata over caches that hold the same compute exactly one layer's
forward (so the reference, which knows one layer, stays the truth for a correct proposer); a
second layer given other lengths changes the output. A scenario asking for two draft attention
groups is refused by name where the implementation builds one.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from mtp.model import AttentionMeta
from sim.impls import core
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp
from sim.serving.run import run_scenario
from sim.serving.scenario import Scenario

pytestmark = pytest.mark.order(-3)


def _inputs():
    cfg = TinyConfig(vocab_size=32, hidden_size=32)
    cache = PagedKvCache(4, 4, cfg.num_heads, cfg.head_dim, "cpu")
    cache.fill_(float("nan"))  # nothing written but what the forward writes
    model = TinyMtp(cfg, cache)
    ids, positions = torch.tensor([3, 5, 7, 1, 2]), torch.tensor([0, 1, 2, 0, 1])
    hidden = torch.randn(5, 32, generator=torch.Generator().manual_seed(0))
    return model, ids, positions, hidden


def _meta(seq_lens):
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    slots = torch.tensor([0, 1, 2, 8, 9])
    qsl = torch.tensor([0, 3, 5], dtype=torch.int32)
    return AttentionMeta(qsl, torch.tensor(seq_lens, dtype=torch.int32), table, slots, torch.tensor([8]))


def test_two_layers_with_one_steps_metadata_compute_one_layers_forward_exactly():
    model, ids, positions, hidden = _inputs()
    second = model.cache.clone()
    one = model.forward(ids, positions, hidden, _meta([3, 2]))
    model.cache.fill_(float("nan"))
    two = model.forward_layers(ids, positions, hidden, [(model.cache, _meta([3, 2])), (second, _meta([3, 2]))])
    assert torch.equal(one, two)
    assert _same(second, model.cache)  # each layer wrote its own cache, at the same slots


def _same(a: PagedKvCache, b: PagedKvCache) -> bool:
    return all(torch.allclose(x, y, rtol=0, atol=0, equal_nan=True) for x, y in ((a.k, b.k), (a.v, b.v)))


def test_a_second_layer_given_other_lengths_changes_the_output():
    model, ids, positions, hidden = _inputs()
    second = model.cache.clone()
    second.k.zero_(), second.v.zero_()  # an unwritten slot reads zeros here, not NaN
    right = model.forward_layers(ids, positions, hidden, [(model.cache, _meta([3, 2])), (second, _meta([3, 2]))])
    wrong = model.forward_layers(ids, positions, hidden, [(model.cache, _meta([3, 2])), (second, _meta([3, 3]))])
    assert not torch.equal(right, wrong)


def test_more_layers_than_heads_are_refused():
    model, ids, positions, hidden = _inputs()
    layers = [(model.cache.clone(), _meta([3, 2])) for _ in range(3)]
    with pytest.raises(ValueError, match="3 attention layers: expected 1 to 2"):
        model.forward_layers(ids, positions, hidden, layers)


@pytest.mark.parametrize("groups", [0, 3])
def test_a_scenario_names_a_draft_group_count_it_cannot_have(groups):
    with pytest.raises(ValueError, match=f"draft_attn_groups={groups}: expected 1 or 2"):
        Scenario(draft_attn_groups=groups)


def test_a_run_of_two_draft_groups_on_an_implementation_of_one_is_refused_by_name():
    from devices.sim.device import SimDevice

    scenario = Scenario(draft_attn_groups=2)
    assert "lacks a draft whose layers form several attention groups" in core().refuses(scenario, "sim")
    assert core().refuses(dataclasses.replace(scenario, draft_attn_groups=1), "sim") is None
    with pytest.raises(ValueError, match="draft_attn_groups=2: core lacks"):
        run_scenario(scenario, SimDevice(), core())


def test_a_scenario_names_a_draft_attention_family_it_cannot_have():
    with pytest.raises(ValueError, match="draft_attn='gdn': expected one of"):
        Scenario(draft_attn="gdn")
    with pytest.raises(ValueError, match="draft_attn='mla' with mrope=True, draft_attn_groups=1"):
        Scenario(draft_attn="mla", mrope=True)
    with pytest.raises(ValueError, match="draft_attn='sfa' with mrope=False, draft_attn_groups=2"):
        Scenario(draft_attn="sfa", draft_attn_groups=2)
    with pytest.raises(ValueError, match="draft_attn='mla' with mrope=False, draft_attn_groups=2"):
        Scenario(draft_attn="mla", draft_attn_groups=2)


def test_a_run_of_an_mla_draft_on_an_implementation_without_its_builder_is_refused_by_name():
    from devices.sim.device import SimDevice

    scenario = Scenario(draft_attn="mla")
    assert "lacks an MLA draft layer" in core().refuses(scenario, "sim")
    assert core().refuses(dataclasses.replace(scenario, draft_attn="gqa"), "sim") is None
    with pytest.raises(ValueError, match="draft_attn='mla': core lacks"):
        run_scenario(scenario, SimDevice(), core())
    with pytest.raises(ValueError, match="draft_attn='mla': the core's draft model rotates by its rows' positions"):
        run_scenario(scenario, SimDevice())


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"method": "eagle3"}, "method='eagle3': mtp-only lacks an EAGLE-3 drafter"),
        ({"mrope": True}, "mrope=True: mtp-only lacks M-RoPE"),
    ],
)
def test_a_run_of_a_method_or_rope_an_implementation_lacks_is_refused_by_name(fields, named):
    """An adapter built for MTP on a text-only target (``tables.lacks``' defaults) refuses an eagle3 or
    M-RoPE scenario before it builds anything, naming the field, the implementation and the reason."""
    from devices.sim.device import SimDevice
    from sim.impls.kit import tables

    mtp_only = dataclasses.replace(core(), name="mtp-only", lacks=tables.lacks("eager only"))
    scenario = Scenario(**fields)
    assert named in mtp_only.refuses(scenario, "sim")
    assert core().refuses(scenario, "sim") is None
    with pytest.raises(ValueError, match=named):
        run_scenario(scenario, SimDevice(), mtp_only)
