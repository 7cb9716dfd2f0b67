"""``python -m sim``: run a serving simulation or a sweep of seeds, replay a failing case, draw a report,
bisect a vllm-ascend range for the commit that broke the gate.

Exit status: 0 when every compared draft and step matched the reference, 1
when something differed (or the proposer raised), 2 for a bad argument or
file: one line naming it and its value. ``--debug`` shows tracebacks.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from devices import DeviceUnavailable, load_device
from devices.plugins import import_object
from sim.cli import ranks
from sim.cli.parser import build_parser
from sim.cli.usage import UsageError, checked
from sim.serving.run import RunReport, run_scenario
from sim.serving.scenario import Scenario, default_scenario
from sim.serving.terminal import console, print_report, print_sweep


# ------------------------------------------------------------------ printing
def _serve(scenario: Scenario, device, impl, ops=None, check: bool = True, label: str = "serving") -> RunReport:
    columns = [
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=len(scenario.requests))
        return run_scenario(
            scenario,
            device,
            impl,
            ops=ops,
            check=check,
            stop_at_first_mismatch=False,
            count_syncs=True,
            on_iteration=lambda _report, sim, _proposer: bar.update(task, completed=sim.finished),
        )


def _replay_hint(report: RunReport, args) -> None:
    """Write a failing run's scenario where a person finds it, with the command that reruns it."""
    path = report.scenario.save(f"failures/run-seed-{report.scenario.seed}.json")
    options = "".join(
        f" --{name} {value}"
        for name, value, default in (
            ("impl", args.impl, "core"),
            ("divergences", args.divergences, None),
            ("device", args.device, "sim"),
        )
        if value != default
    )
    console.print(f"  first: {report.mismatches[0]}")
    console.print(f"  replay: python -m sim replay {path}{options}", soft_wrap=True)  # a command: never broken


# ------------------------------------------------------------------ commands
def _load_impl(name: str, divergences: str | None = None):
    """The implementation ``name``, accepting only the divergences listed in the file ``divergences``
    where one is given (an entry that names none of its divergences is warned of, as the gate does)."""
    from sim.impls import ImplementationUnavailable, load_implementation

    try:
        impl = load_implementation(name)
    except ImplementationUnavailable as exc:
        raise UsageError(f"--impl {name}: {exc}") from None
    if divergences is None:
        return impl
    try:
        impl, unknown = impl.accepting_list(divergences)
    except OSError as exc:
        raise UsageError(f"--divergences {divergences}: {exc.strerror}") from None
    for entry in unknown:
        console.print(
            f"[yellow]warning:[/] --divergences {divergences}: {entry!r} matches no divergence of {name}",
            soft_wrap=True,
        )
    return impl


def _load_device(name: str):
    try:
        return load_device(name)
    except DeviceUnavailable as exc:
        raise UsageError(f"--device {name}: {exc}") from None


def _finish(reports: list[RunReport], device, impl, args) -> int:
    if args.json:
        from sim.serving.report import run_to_dict, write_json

        path = write_json([run_to_dict(r, device.describe(), impl.name) for r in reports], args.json)
        console.print(f"report written to {path}")
    failing = [r for r in reports if not r.ok]
    if failing and args.command == "run":
        _replay_hint(failing[0], args)
    return 1 if failing else 0


def cmd_run(args) -> int:
    ranks.check_pcp_args(args)
    seeds = args.seeds if args.seeds is not None else [args.seed]
    if args.save and len(seeds) > 1:
        raise UsageError(f"--save {args.save} with --seeds: a sweep has one scenario per seed; give one --seed")
    scenarios = [
        checked(
            default_scenario,
            seed,
            args.requests,
            padded=not args.unpadded,
            accept=args.accept,
            num_spec_tokens=args.k,
            block_size=args.block_size,
            max_model_len=args.max_model_len,
            graph_mode=args.graph_mode,
            mrope=args.mrope,
            method=args.method,
            draft_attn=args.attn,
            decode_node=args.decode_node,
            scheduler=args.scheduler,
            kv_blocks=args.kv_blocks,
            prefix_caching=args.prefix_caching,
            shared_prefix=args.shared_prefix,
            kernel_block_size=args.kernel_block_size,
            async_scheduling=args.async_scheduling,
            runner_samples=args.runner_samples,
            **ranks.tp_fields(args),
        )
        for seed in seeds
    ]
    ranks.check_tp_args(args, scenarios[0])
    device, impl = _load_device(args.device), _load_impl(args.impl, args.divergences)
    if args.dp:
        if len(scenarios) > 1 or args.pcp or scenarios[0].tp > 1 or args.no_check:
            raise UsageError(f"--dp {args.dp}: one --seed, no --pcp, --tp or --no-check (each rank is checked)")
        case = ranks.accepting(ranks.dp_workloads(scenarios[0], args.dp, args.lmhead_tp), impl)
        if args.save:
            case.save(args.save)
        return ranks.run_vllm_ascend_ranks(case, device, impl)
    if ranks.vllm_ascend_tp(args) or args.reduce_sample:
        case = ranks.accepting(ranks.tp_case(args, scenarios), impl)
        if args.save:
            case.save(args.save)
        return ranks.run_vllm_ascend_ranks(case, device, impl)
    if args.save:
        scenarios[0].save(args.save)
    if scenarios[0].tp > 1:
        return max(ranks.run_tp(sc, device, args.pcp) for sc in scenarios)
    if args.pcp:
        return max(ranks.run_pcp(sc, device, args.pcp) for sc in scenarios)
    reports = []
    for i, sc in enumerate(scenarios):
        label = f"seed {sc.seed} ({i + 1}/{len(scenarios)})" if len(scenarios) > 1 else "serving"
        reports.append(_serve(sc, device, impl, check=not args.no_check, label=label))
    if len(reports) == 1:
        print_report(reports[0], device, impl)
    else:
        print_sweep(reports)
    return _finish(reports, device, impl, args)


def cmd_replay(args) -> int:
    ranks.check_pcp_args(args)
    case = ranks.vllm_ascend_ranks_case(args.case)
    if case is not None:
        device, impl = _load_device(args.device), _load_impl(args.impl, args.divergences)
        return ranks.run_vllm_ascend_ranks(ranks.accepting(case, impl), device, impl)
    scenario = checked(Scenario.load, args.case)
    if ranks.tp_fields(args):
        scenario = checked(dataclasses.replace, scenario, **ranks.tp_fields(args))
    ranks.check_tp_args(args, scenario)
    if args.proposer and not (args.pcp or scenario.tp > 1):
        raise UsageError(
            f"--proposer {args.proposer}: only on ranks, --pcp or tp > 1 (a PcpProposer or TP proposer subclass)"
        )
    ops = _import(args.ops, "--ops")() if args.ops else None
    if args.proposer:
        _import(args.proposer, "--proposer")
    device, impl = _load_device(args.device), _load_impl(args.impl, args.divergences)
    if scenario.tp > 1:
        return ranks.run_tp(scenario, device, args.pcp, proposer=args.proposer)
    if args.pcp:
        return ranks.run_pcp(scenario, device, args.pcp, proposer=args.proposer, ops=args.ops)
    report = _serve(scenario, device, impl, ops=ops)
    print_report(report, device, impl)
    return _finish([report], device, impl, args)


def _import(spec: str, option: str):
    try:
        return import_object(spec)
    except Exception as exc:  # noqa: BLE001 - any import failure is a bad argument; name it
        raise UsageError(f"{option} {spec}: cannot import it ({type(exc).__name__}: {exc})") from None


def cmd_report(args) -> int:
    from sim.serving.report import load_runs, write_html

    try:
        runs = load_runs(args.runs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("report: matplotlib is not installed (pip install 'mtp-harness[report]')") from None
    out = args.html or str(args.runs).removesuffix(".json") + ".html"
    path = write_html(runs, out)
    bad = sum(len(r["mismatches"]) for r in runs)
    console.print(f"{len(runs)} run(s), {bad} mismatch(es): picture written to {path}")
    return 0


def cmd_sensitivity(args) -> int:
    from sim.oracle.sensitivity import measure

    table = Table("perturbation", "draft 1 changed")
    for name, rate in measure(args.trials).items():
        table.add_row(name, f"{rate:.1%}")
    console.print(table)
    return 0


def cmd_explain(args) -> int:
    from sim.explain import explain
    from sim.serving.report import explanation_html

    device = _load_device(args.device)
    _load_impl(args.impl)  # an unavailable implementation: one line naming the cause
    try:
        found = explain(args.impl, args.id, device, args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    d = found.divergence
    console.print(f"[bold]{d.label()}[/] of [bold]{args.impl}[/], in {d.where}")
    console.print(f"  the design: {d.core}\n  {args.impl}: {d.impl}\n  pinned by: {d.pinned_by}")
    if found.case is None:
        console.print("no workload searched shows it: the drafts and metadata it governs equal the spec's there")
    else:
        path = found.case.save(f"failures/explain-{d.id}.json")
        console.print(
            f"smallest case found: {len(found.case.requests)} requests, {found.case.max_iterations} iterations, "
            f"{'padded' if found.case.padded else 'unpadded'}; replay: python -m sim replay {path} --impl {args.impl}"
        )
        console.print(f"under the spec for {d.id}: {len(found.under_spec.mismatches)} differences")
        for m in found.under_spec.mismatches[:12]:
            console.print(f"  {m}")
        console.print(f"under {args.impl}'s own rules: {len(found.under_rules.mismatches)} differences")
    table = Table("draft position", "core", args.impl, "lost")
    core, impl = found.core_run.acceptance(), found.impl_run.acceptance()
    for p in sorted(set(core) | set(impl)):
        table.add_row(
            str(p), f"{core.get(p, 0):.3f}", f"{impl.get(p, 0):.3f}", f"{core.get(p, 0) - impl.get(p, 0):+.3f}"
        )
    console.print(
        "acceptance per draft position, a verifier accepting what a correct proposer drafts (accept=reference):"
    )
    console.print(table)
    out = Path(args.html or f"explain-{d.id}.html")
    out.write_text(explanation_html(found, args.impl))
    console.print(f"written: {out}")
    return 0


def cmd_bisect(args) -> int:
    from sim.bisect import bisect

    return bisect(args.checkout, args.good, args.bad, args.case, args.envs, args.pytest_args)


COMMANDS = {
    "run": cmd_run,
    "replay": cmd_replay,
    "report": cmd_report,
    "sensitivity": cmd_sensitivity,
    "explain": cmd_explain,
    "bisect": cmd_bisect,
}


def main(argv=None) -> int:
    try:
        args = build_parser(__doc__).parse_args(argv)
    except SystemExit as exc:  # --help (0), or a bad argument (2): argparse has printed it
        return int(exc.code or 0)
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        if args.debug:
            raise
        print(f"python -m sim {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the proposer (or a model) raised mid-run: a failure, in one line
        if args.debug:
            raise
        print(
            f"python -m sim {args.command}: {type(exc).__name__}: {exc} (--debug shows the traceback)", file=sys.stderr
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
