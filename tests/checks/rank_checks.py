"""Scenarios served on real rank pools, checked against one rank; the failure says how to replay.

Shared by the PCP and TP properties and by the meta-tests that break them.
``PCP_SMALL`` and ``TP_SMALL`` are the cases every broken rank variant fails on.
"""

from __future__ import annotations

import dataclasses

from sim.ranks.pcp import check_pcp
from sim.ranks.tp import check_tp
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import FAILURE_DIR

# A long prefill split over the ranks beside decodes, blocks crossed.
PCP_SMALL = Scenario(
    num_spec_tokens=3,
    block_size=2,
    token_budget=24,
    requests=(RequestSpec(0, 30, 6), RequestSpec(0, 5, 6), RequestSpec(1, 11, 6)),
)
TP_SMALL = dataclasses.replace(PCP_SMALL, tp=2, lmhead_tp=True)
TP_SMALL_SEDP = dataclasses.replace(TP_SMALL, lmhead_tp=False, shared_expert_dp=True)


def variant_path(variant) -> str | None:
    """``module:name`` of a broken variant, as rank processes import it (None: the core's)."""
    return None if variant is None else f"{variant.__module__}:{variant.__qualname__}"


def assert_pcp(scenario, pool, device, name, proposer=None, ops=None) -> None:
    problems = check_pcp(scenario, pool, device, proposer=proposer, ops=ops)
    if problems:
        path = scenario.save(FAILURE_DIR / f"{name}.json")
        extra = "".join(f" --{k} {v}" for k, v in (("proposer", proposer), ("ops", ops)) if v)
        raise AssertionError(
            "\n  ".join(problems[:6]) + f"\nreplay: python -m sim replay {path} --pcp {pool.size}{extra}"
        )


def assert_tp(scenario, pool, device, name, proposer=None) -> None:
    problems = check_tp(scenario, pool, device, proposer=proposer)
    if problems:
        path = scenario.save(FAILURE_DIR / f"{name}.json")
        extra = f" --pcp {pool.size // scenario.tp}" if pool.size > scenario.tp else ""
        extra += f" --proposer {proposer}" if proposer else ""
        raise AssertionError("\n  ".join(problems[:6]) + f"\nreplay: python -m sim replay {path}{extra}")
