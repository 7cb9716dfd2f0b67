"""Where vLLM 0.33.0's MRV2 ``MTPSpeculator`` differs from the core: the one table.

docs/DIVERGENCES-vllm-mrv2.md explains each entry; tests/impls/vllm_mrv2/ pins each one (the test
named in ``pinned_by`` asserts that the difference exists, exactly where the entry says). Its
speculator is the MRV2 loop as vLLM wrote it, so its table is the loop's design differences
(``sim.impls.kit.mrv2_loop``), which vllm-ascend's MRV2 speculators inherit.
"""

from __future__ import annotations

from sim.impls.divergence import rules_of
from sim.impls.features import Feature
from sim.impls.kit import mrv2_loop, tables

DIVERGENCES = mrv2_loop.LOOP

RULES = rules_of(DIVERGENCES.values())

# What it cannot run (sim.impls.features): a property using one is skipped with this reason.
LACKS = tables.lacks(
    "the MRV2 adapter runs eagerly only (its drafter graphs are CUDA graphs)",
    more=mrv2_loop.NO_UNPADDED,
    has=(Feature.EAGLE, Feature.EAGLE3),
)
