"""A divergence of some draft attention families only (``Divergence.families``): it holds in a run of those
families, and a run of another is held to the spec there (``run_scenario``: ``Rules.unmodelled``)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.divergence import Divergence, Kind, rules_of
from sim.oracle.rules import CORE
from sim.serving.scenario import Scenario

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

HOST_LISTS = Divergence(
    "host-lengths-not-lowered",
    "a host list",
    "lowered",
    "not lowered",
    "test_x.py::test_y",
    kind=Kind.DEFECT,
    rule={"padded_seq_lens_lowered": False},
    families=("gqa", "mla"),
)


@pytest.mark.parametrize(("attn", "holds"), [("gqa", True), ("mla", True), ("sfa", False)])
def test_a_divergence_holds_for_the_families_it_names(attn, holds):
    assert HOST_LISTS.holds_for(Scenario(draft_attn=attn)) is holds
    every = dataclasses.replace(HOST_LISTS, families=None)
    assert every.holds_for(Scenario(draft_attn=attn))


def test_unmodelled_is_the_spec_for_it_and_keeps_the_rest():
    rules = dataclasses.replace(rules_of([HOST_LISTS]), overflow_position="clamp")
    spec = rules.unmodelled(HOST_LISTS.id, HOST_LISTS.rule)
    assert not rules.padded_seq_lens_lowered and spec.padded_seq_lens_lowered == CORE.padded_seq_lens_lowered
    assert HOST_LISTS.id not in dict(spec.defects) and spec.overflow_position == "clamp"
