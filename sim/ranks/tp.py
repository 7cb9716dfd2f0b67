"""Tensor parallel on real ranks: TP ranks serve a scenario and must equal one rank.

A TP rank serves scenarios exactly as a PCP rank does (``sim.ranks.pcp``:
the same serve function, the same comparison with one rank, drafts and
per-step metadata), with the proposer of the scenario's TP paths instead of
a ``PcpProposer``: lm-head TP (``mtp.tp``), shared-expert DP
(``mtp.shared_expert_dp``), or both.
"""

from __future__ import annotations

from sim.ranks.pcp import PcpPool, check_pcp
from sim.serving.scenario import Scenario

PROPOSERS = {
    (True, False): "mtp.tp:LmHeadTpProposer",
    (False, True): "mtp.shared_expert_dp:SharedExpertDpProposer",
    (True, True): "mtp.shared_expert_dp:SharedExpertDpLmHeadTpProposer",
}


class TpPool(PcpPool):
    """``size`` TP ranks on ``device_name``; cases name the proposer each rank runs."""


def tp_proposer(scenario: Scenario) -> str:
    """ "module:Class" of the proposer that runs the scenario's TP paths."""
    return PROPOSERS[scenario.lmhead_tp, scenario.shared_expert_dp]


def check_tp(
    scenario: Scenario, pool: TpPool, device, proposer: str | None = None, ops: str | None = None
) -> list[str]:
    """Problems found running ``scenario`` on ``pool``'s TP ranks; empty if equal to one rank."""
    if pool.size != scenario.tp:
        raise ValueError(f"pool of {pool.size} ranks for a scenario with tp={scenario.tp}")
    return check_pcp(scenario, pool, device, proposer=proposer or tp_proposer(scenario), ops=ops)
