"""lm-head tensor parallel on real ranks: TP ranks serve a scenario and must equal one rank.

A TP rank serves scenarios exactly as a PCP rank does (``sim.ranks.pcp``:
the same serve function, the same comparison with one rank, drafts and
per-step metadata), with an ``mtp.tp.LmHeadTpProposer`` (or a subclass)
instead of a ``PcpProposer``.
"""

from __future__ import annotations

from sim.ranks.pcp import PcpPool, check_pcp
from sim.serving.scenario import Scenario

LMHEAD_TP = "mtp.tp:LmHeadTpProposer"


class TpPool(PcpPool):
    """``size`` TP ranks on ``device_name``; cases name the proposer each rank runs."""


def check_lmhead_tp(
    scenario: Scenario, pool: TpPool, device, proposer: str | None = None, ops: str | None = None
) -> list[str]:
    """Problems found running ``scenario`` with the lm head split over ``pool``'s ranks; empty if equal to one rank."""
    return check_pcp(scenario, pool, device, proposer=proposer or LMHEAD_TP, ops=ops)
