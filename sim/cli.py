"""``python -m sim``: run a serving simulation, replay a failing case, measure sensitivity."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from devices import DeviceUnavailable, load_device
from devices.plugins import import_object
from sim.serving.run import RunReport, run_scenario
from sim.serving.scenario import ACCEPT_POLICIES, Scenario, default_scenario

console = Console()


def _run(scenario: Scenario, device, ops=None, check: bool = True) -> RunReport:
    total = len(scenario.requests)
    columns = [
        TextColumn("[bold]serving"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("serving", total=total)
        report = run_scenario(
            scenario,
            device,
            ops=ops,
            check=check,
            stop_at_first_mismatch=False,
            on_iteration=lambda _report, sim, _proposer: bar.update(task, completed=sim.finished),
        )
    return report


def print_report(report: RunReport, device) -> None:
    sc = report.scenario
    mode = "padded" if sc.padded else "unpadded"
    console.print(
        f"[bold]device[/] {device.describe()}  [bold]mode[/] {mode}  [bold]K[/] {sc.num_spec_tokens}  "
        f"[bold]block size[/] {sc.block_size}  [bold]accept[/] {sc.accept}  [bold]seed[/] {sc.seed}"
    )
    console.print(
        f"iterations {report.iterations}   requests finished {report.finished}/{len(sc.requests)}   "
        f"proposals {report.proposals}"
    )
    table = Table("draft position", "verified", "accepted", "acceptance rate")
    for pos, rate in report.acceptance().items():
        table.add_row(str(pos), str(report.verified[pos]), str(report.accepted[pos]), f"{rate:.3f}")
    console.print(table)
    syncs = sum(report.host_syncs.values())
    console.print(f"host syncs inside propose: {syncs} ({syncs / max(report.iterations, 1):.2f} per call)")
    for (op, site), n in report.host_syncs.most_common(5):
        console.print(f"  {op} at {site}: {n}")
    console.print("exercised: " + ", ".join(f"{f} ({n})" for f, n in sorted(report.features.items())))
    compared = f"{report.drafts_compared} drafts compared, {report.drafts_ambiguous} skipped as near ties"
    if report.ok:
        console.print(f"[green]mismatches against the reference: 0[/] ({compared})")
    else:
        console.print(f"[red]mismatches against the reference: {len(report.mismatches)}[/] ({compared})")
        for m in report.mismatches[:10]:
            console.print(f"  {m}")


def _replay_pcp(scenario: Scenario, device, args) -> int:
    from sim.ranks.pcp import PcpPool, check_pcp

    pool = PcpPool(args.pcp, device.name)
    try:
        with console.status(f"serving on {args.pcp} ranks and on one"):
            problems = check_pcp(scenario, pool, device, proposer=args.proposer, ops=args.ops)
    finally:
        pool.close()
    if not problems:
        console.print(f"[green]PCP with {args.pcp} ranks equals one rank[/] (drafts and per-step metadata, every rank)")
        return 0
    console.print(f"[red]PCP with {args.pcp} ranks differs from one rank:[/]")
    for p in problems:
        console.print(f"  {p}")
    return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve a default mixed workload and report")
    run.add_argument("--requests", type=int, default=24)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--unpadded", action="store_true", help="unpadded drafter batch (disable_padded_drafter_batch)")
    run.add_argument("--accept", choices=ACCEPT_POLICIES, default="random")
    run.add_argument("--no-check", action="store_true", help="skip the reference comparison")
    run.add_argument("--save", metavar="PATH", help="also write the scenario as JSON")
    replay = sub.add_parser("replay", help="rerun a scenario JSON file (as printed by a failing test)")
    replay.add_argument("case")
    replay.add_argument("--ops", metavar="MODULE:CLASS", help="a CoreOps subclass to run instead of the core")
    replay.add_argument(
        "--pcp", type=int, metavar="P", help="run on P prefill-context-parallel ranks and compare with one"
    )
    replay.add_argument("--proposer", metavar="MODULE:CLASS", help="with --pcp: a PcpProposer subclass to run")
    sens = sub.add_parser("sensitivity", help="how often one wrong input changes the tiny model's draft")
    sens.add_argument("--trials", type=int, default=500)
    for p in (run, replay):
        p.add_argument("--device", default="sim")
    args = parser.parse_args(argv)

    if args.command == "sensitivity":
        from sim.oracle.sensitivity import measure

        table = Table("perturbation", "draft 1 changed")
        for name, rate in measure(args.trials).items():
            table.add_row(name, f"{rate:.1%}")
        console.print(table)
        return 0
    try:
        device = load_device(args.device)
    except DeviceUnavailable as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if args.command == "run":
        scenario = default_scenario(args.seed, args.requests, padded=not args.unpadded, accept=args.accept)
        if args.save:
            scenario.save(args.save)
        report = _run(scenario, device, check=not args.no_check)
    elif args.pcp:
        return _replay_pcp(Scenario.load(args.case), device, args)
    else:
        report = _run(Scenario.load(args.case), device, ops=import_object(args.ops)() if args.ops else None)
    print_report(report, device)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
