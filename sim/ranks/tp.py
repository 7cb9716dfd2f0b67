"""Tensor parallel on real ranks: TP ranks serve a scenario and must equal one rank.

A TP rank serves scenarios exactly as a PCP rank does (``sim.ranks.pcp``:
the same serve function, the same comparison with one rank, drafts and
per-step metadata), with the proposer of the scenario's TP paths instead of
a ``PcpProposer``: lm-head TP (``mtp.tp``), shared-expert DP
(``mtp.shared_expert_dp``), or both; with more ranks than ``scenario.tp``,
PCP and one TP path on a P x T mesh (``mtp.pcp_tp``).
"""

from __future__ import annotations

from sim.ranks.pcp import PcpPool, check_pcp
from sim.serving.scenario import Scenario

PROPOSERS = {  # (lmhead_tp, shared_expert_dp, with PCP ranks)
    (True, False, False): "mtp.tp:LmHeadTpProposer",
    (False, True, False): "mtp.shared_expert_dp:SharedExpertDpProposer",
    (True, True, False): "mtp.shared_expert_dp:SharedExpertDpLmHeadTpProposer",
    (True, False, True): "mtp.pcp_tp:PcpLmHeadTpProposer",
    (False, True, True): "mtp.pcp_tp:PcpSharedExpertDpProposer",
}


class TpPool(PcpPool):
    """``size`` ranks on ``device_name``: ``tp`` TP ranks each, times ``size / tp`` PCP ranks."""


def tp_proposer(scenario: Scenario, pcp: int = 1) -> str:
    """ "module:Class" of the proposer that runs the scenario's TP paths (beside ``pcp`` PCP ranks)."""
    key = (scenario.lmhead_tp, scenario.shared_expert_dp, pcp > 1)
    if key not in PROPOSERS:
        raise ValueError(f"pcp={pcp} with lmhead_tp and shared_expert_dp both: not modelled (one TP path with PCP)")
    return PROPOSERS[key]


def check_tp(
    scenario: Scenario, pool: TpPool, device, proposer: str | None = None, ops: str | None = None
) -> list[str]:
    """Problems found running ``scenario`` on ``pool``'s ranks (``scenario.tp`` TP ranks, times
    ``pool.size / scenario.tp`` PCP ranks); empty if equal to one rank."""
    if pool.size % scenario.tp:
        raise ValueError(f"pool of {pool.size} ranks for a scenario with tp={scenario.tp}: tp must divide it")
    pcp = pool.size // scenario.tp
    return check_pcp(scenario, pool, device, proposer=proposer or tp_proposer(scenario, pcp), ops=ops)
