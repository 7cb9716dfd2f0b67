"""PCP against a single rank: same drafts, same per-step metadata, on every rank."""

from __future__ import annotations

from dataclasses import asdict

import torch

from sim.pcp_pool import PcpCase, PcpPool
from sim.run import run_scenario
from sim.scenario import Scenario

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
    single, traces = single_rank(scenario, device)
    if not single.ok:
        return [f"single rank differs from the reference: {single.mismatches[0]}"]
    problems = []
    for result in pool.run(PcpCase(asdict(scenario), proposer=proposer, ops=ops)):
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
