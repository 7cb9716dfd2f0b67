"""Prefill context parallel on real ranks: what a PCP rank serves, and the check that P ranks equal one.

``PcpPool`` is a ``RankPool`` whose ranks serve ``PcpCase``s with a
``PcpProposer``; ``check_pcp`` runs a scenario on the pool and on one rank
(checked against the reference) and lists every difference in drafts or
per-step metadata, per rank.
"""

from __future__ import annotations

import functools
import os
import time
import traceback
from dataclasses import asdict, dataclass

import torch

from devices.plugins import import_object
from sim.ranks.pool import RankError, RankPool, RankResult
from sim.serving.run import run_scenario
from sim.serving.scenario import Scenario


@dataclass
class PcpCase:
    """What every rank runs: a scenario, optionally a broken proposer, optionally a fault.

    proposer: "module:Class" of a PcpProposer subclass, or None for the real one.
    ops:      "module:Class" of a CoreOps subclass, or None for the core's.
    fault:    (rank, kind, iteration) with kind "raise", "exit" or "hang".
    """

    scenario: dict  # dataclasses.asdict(Scenario)
    proposer: str | None = None
    ops: str | None = None
    fault: tuple[int, str, int] | None = None


def _error_kind(exc: Exception) -> str:
    from mtp.collectives import CollectiveError, CollectiveMismatchError

    if isinstance(exc, CollectiveMismatchError):
        return "mismatch"
    return "collective" if isinstance(exc, CollectiveError) else "crash"


def _groups(cls: type, tp: int, rank: int, size: int) -> dict:
    """A rank's group arguments: the whole pool as one group, or, for a proposer on a P x T mesh
    (``mtp.pcp_tp``; a 1 x 1 mesh included), its place in the mesh."""
    from devices.collectives import all_gather_rows, mesh_groups
    from mtp.pcp_tp import PcpTpRank

    if not issubclass(cls, PcpTpRank):
        if tp not in (1, size):
            raise ValueError(f"tp={tp} of {size} ranks needs a P x T mesh proposer (mtp.pcp_tp), not {cls.__name__}")
        return {"rank": rank, "size": size, "all_gather": all_gather_rows}
    pcp_group, tp_group = mesh_groups(tp)
    return {
        "rank": rank // tp,
        "size": size // tp,
        "all_gather": functools.partial(all_gather_rows, group=pcp_group),
        "tp_rank": rank % tp,
        "tp_size": tp,
        "tp_all_gather": functools.partial(all_gather_rows, group=tp_group),
    }


def serve_pcp(case: PcpCase, rank: int, size: int, device) -> RankResult:
    """One rank's run of ``case`` with a ``PcpProposer`` of that rank (the pool's serve function)."""
    from mtp.pcp_proposer import PcpProposer

    result = RankResult(rank)
    made = []

    def factory(*args, **kwargs):
        cls = import_object(case.proposer) if case.proposer else PcpProposer
        proposer = cls(*args, **_groups(cls, case.scenario.get("tp", 1), rank, size), **kwargs)
        proposer.record(True)
        made.append(proposer)
        return proposer

    def on_iteration(report, sim, proposer):
        result.traces.append(list(proposer.trace))
        result.collectives = proposer.collectives
        if case.fault and case.fault[0] == rank and case.fault[2] == report.iterations:
            kind = case.fault[1]
            if kind == "raise":
                raise RuntimeError(f"injected fault on rank {rank}")
            if kind == "exit":
                os._exit(3)
            if kind == "hang":
                time.sleep(3600)

    try:
        ops = import_object(case.ops)() if case.ops else None
        scenario = Scenario.from_dict(case.scenario)
        report = run_scenario(scenario, device, ops=ops, check=False, proposer_cls=factory, on_iteration=on_iteration)
        made[0].close_collectives()  # a rank behind its peers is reported now, not after a timeout
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        raise RankError(message, made[0].collectives if made else 0, _error_kind(exc)) from exc
    result.drafts = report.drafts
    result.collectives = made[0].collectives
    return result


class PcpPool(RankPool):
    """``size`` PCP ranks on ``device_name``, serving ``PcpCase``s."""

    def __init__(self, size: int, device_name: str = "sim", **timeouts):
        super().__init__(size, "sim.ranks.pcp:serve_pcp", device_name, **timeouts)


FIELDS = ("input_ids", "positions", "seq_lens", "slot_mapping", "query_start_loc", "sample_indices")


def single_rank(scenario: Scenario, device):
    """The one-rank run (checked against the reference) and its per-iteration traces."""
    traces = []
    report = run_scenario(
        scenario,
        device,
        on_iteration=lambda _r, _s, proposer: traces.append(list(proposer.trace)),
        stop_at_first_mismatch=True,
    )
    return report, traces


def check_pcp(
    scenario: Scenario, pool: PcpPool, device, proposer: str | None = None, ops: str | None = None
) -> list[str]:
    """Problems found running ``scenario`` on ``pool``'s ranks; empty if PCP equals one rank."""
    pool.submit(PcpCase(asdict(scenario), proposer=proposer, ops=ops))  # the ranks serve while this runs one rank
    try:
        single, traces = single_rank(scenario, device)
    except BaseException:
        pool.close()  # the ranks' answer would be read as the next case's
        raise
    if not single.ok:
        pool.close()
        return [f"single rank differs from the reference: {single.mismatches[0]}"]
    problems = []
    for result in pool.collect():
        r = result.rank
        for it, (want, got) in enumerate(zip(single.drafts, result.drafts)):
            if want != got:
                problems.append(f"rank {r}, iteration {it}: drafts {got} != single rank {want}")
                break
        for it, (want, got) in enumerate(zip(traces, result.traces)):
            bad = [
                f"step {w.step} {name}"
                for w, g in zip(want, got)
                for name in FIELDS
                if not torch.equal(getattr(w, name), getattr(g, name))
            ]
            if bad:
                problems.append(f"rank {r}, iteration {it}: metadata differs from single rank: {', '.join(bad[:4])}")
                break
    return problems
