"""The CLI's runs on ranks: PCP and TP of the core, compared with one rank; a DP or TP case of
vllm-ascend's drafter, each rank against the reference and all against each other; and the option
checks they need."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sim.cli.usage import UsageError, checked
from sim.serving.scenario import Scenario
from sim.serving.terminal import console


def on_ranks(
    what: str,
    pool,
    check,
    agree: str = "equals one rank",
    differ: str = "differs from one rank",
    compared: str = "drafts and per-step metadata, every rank",
) -> int:
    """Run ``check(pool)`` (problems, empty when the ranks agree: by default, with one rank), close the
    pool, report."""
    try:
        with console.status(f"serving on {what}"):
            problems = check(pool)
    finally:
        pool.close()
    if not problems:
        console.print(f"[green]{what} {agree}[/] ({compared})")
        return 0
    console.print(f"[red]{what} {differ}:[/]")
    for p in problems:
        console.print(f"  {p}")
    return 1


def accepting(case, impl):
    """``case`` (DP or TP) accepting the divergences ``impl`` was given by a ``--divergences`` list, in
    place of what its file names; unchanged without a list."""
    if impl.divergence_list is None:
        return case
    return dataclasses.replace(case, divergences=tuple(d.id for d in impl.divergences))


def run_vllm_ascend_ranks(case, device, impl) -> int:
    """A DP or TP case on its ranks (vllm-ascend's drafter): each rank against the reference, all against
    each other, accepting the divergences the case names."""
    from sim.impls.vllm_ascend.data_parallel import DpCase, DpPool, check_dp
    from sim.impls.vllm_ascend.tensor_parallel import TpPool, check_tp

    kind = "DP" if isinstance(case, DpCase) else "TP"
    if impl.name != "vllm_ascend" or device.name != "sim":
        raise UsageError(
            f"a {kind} case with --impl {impl.name} --device {device.name}: {kind} ranks run vllm-ascend's"
            " drafter on the simulator (--impl vllm_ascend)"
        )
    if kind == "DP":
        return on_ranks(
            f"{len(case.scenarios)} data-parallel ranks",
            DpPool(len(case.scenarios)),
            lambda pool: check_dp(case, pool),
            agree="agree",
            differ="disagree",
            compared="each with the reference, and with its peers' DP view per step",
        )
    return on_ranks(
        f"{case.size} tensor-parallel ranks",
        TpPool(case.size),
        lambda pool: check_tp(case, pool),
        agree="agree",
        differ="disagree",
        compared="each with the reference, and the collectives over the TP group",
    )


def dp_workloads(scenario: Scenario, n: int, lmhead_tp: bool = False):
    """The DP case of ``n`` ranks each serving ``scenario``'s workload at its own seed (seed + rank); with
    vllm-ascend's lm-head TP across them (``lmhead_tp``), one model: the seed's, each rank the requests
    from its own on (rank r: the workload rotated by r)."""
    from sim.impls.vllm_ascend.data_parallel import DpCase

    def rank(r: int) -> Scenario:
        if lmhead_tp:
            return dataclasses.replace(scenario, requests=scenario.requests[r:] + scenario.requests[:r])
        return dataclasses.replace(scenario, seed=scenario.seed + r)

    return checked(DpCase.of, *(rank(r) for r in range(n)), lmhead_tp=lmhead_tp)


def vllm_ascend_ranks_case(path: str):
    """The DP or TP case a replay file holds (``{"dp_ranks": [...]}``, ``{"tp_ranks": {...}}``), else None
    (a scenario file)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None  # Scenario.load names what is wrong
    if isinstance(data, dict) and "dp_ranks" in data:
        from sim.impls.vllm_ascend.data_parallel import DpCase

        return checked(DpCase.from_dict, data)
    if isinstance(data, dict) and "tp_ranks" in data:
        from sim.impls.vllm_ascend.tensor_parallel import TpCase

        return checked(TpCase.from_dict, data)
    return None


def run_pcp(scenario: Scenario, device, ranks: int, proposer=None, ops=None) -> int:
    from sim.ranks.pcp import PcpPool, check_pcp

    return on_ranks(
        f"PCP with {ranks} ranks",
        PcpPool(ranks, device.name),
        lambda pool: check_pcp(scenario, pool, device, proposer=proposer, ops=ops),
    )


def run_tp(scenario: Scenario, device, pcp: int | None = None, proposer=None) -> int:
    from sim.ranks.tp import TpPool, check_tp

    on = (("lm-head TP", scenario.lmhead_tp), ("shared-expert DP", scenario.shared_expert_dp))
    paths = " and ".join(name for name, used in on if used)
    ranks = f"{scenario.tp} TP ranks" + (f" x {pcp} PCP ranks" if pcp else "")
    return on_ranks(
        f"{paths} on {ranks}",
        TpPool(scenario.tp * (pcp or 1), device.name),
        lambda pool: check_tp(scenario, pool, device, proposer=proposer),
    )


def vllm_ascend_tp(args) -> bool:
    """Whether --tp asks for vllm-ascend's drafter on TP ranks (a ``TpCase``), not the core's TP paths."""
    return bool(args.tp) and args.impl == "vllm_ascend"


def tp_case(args, scenarios: list[Scenario]):
    """The TP case ``run --impl vllm_ascend --tp N [--reduce-sample]`` asks for."""
    from sim.impls.vllm_ascend.tensor_parallel import TpCase

    if not vllm_ascend_tp(args):
        raise UsageError(
            f"--reduce-sample with --impl {args.impl}, --tp {args.tp}: it is vllm-ascend's, on TP ranks"
            " (--impl vllm_ascend --tp N)"
        )
    if len(scenarios) > 1 or args.pcp or args.no_check or args.lmhead_tp or args.shared_expert_dp:
        raise UsageError(
            f"--tp {args.tp} --impl vllm_ascend: one --seed, no --pcp, --no-check, --lmhead-tp or --shared-expert-dp"
            " (each rank is checked; its lm head is split over the TP ranks)"
        )
    return checked(TpCase.of, scenarios[0], args.reduce_sample, size=args.tp)


def tp_fields(args) -> dict:
    """The scenario fields the TP options set (none given: none; with --dp, --lmhead-tp is the DP case's;
    with --impl vllm_ascend, --tp is its ``TpCase``'s)."""
    if vllm_ascend_tp(args) or not (args.tp or (args.lmhead_tp and not args.dp) or args.shared_expert_dp):
        return {}
    return {"tp": args.tp or 1, "lmhead_tp": args.lmhead_tp, "shared_expert_dp": args.shared_expert_dp}


def check_tp_args(args, scenario: Scenario) -> None:
    if scenario.tp > 1 and (args.impl != "core" or getattr(args, "no_check", False)):
        raise UsageError(f"tp={scenario.tp}: TP runs the core alone, compared with one rank (no --impl, --no-check)")
    if args.pcp and scenario.lmhead_tp and scenario.shared_expert_dp:
        raise UsageError(f"--pcp {args.pcp} with lmhead_tp and shared_expert_dp: one TP path beside PCP")


def check_pcp_args(args) -> None:
    if args.pcp and args.impl != "core":
        raise UsageError(f"--pcp {args.pcp} with --impl {args.impl}: prefill context parallel runs the core only")
    if args.pcp and getattr(args, "no_check", False):
        raise UsageError(f"--pcp {args.pcp} with --no-check: a PCP run is a comparison with one rank")
