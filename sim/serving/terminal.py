"""A serving run's report in the terminal: the figures of one run, and one line per run of a sweep.

What ``python -m sim run`` and ``replay`` print (``report.py`` writes the same figures as JSON and
HTML). ``impl`` is the implementation under test, for the divergences in force.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from sim.serving.run import RunReport

console = Console()


def print_report(report: RunReport, device, impl=None) -> None:
    sc = report.scenario
    mode = "padded" if sc.padded else "unpadded"
    console.print(
        f"[bold]device[/] {device.describe()}  [bold]mode[/] {mode}  [bold]K[/] {sc.num_spec_tokens}  "
        f"[bold]block size[/] {sc.block_size}  [bold]accept[/] {sc.accept}  [bold]seed[/] {sc.seed}"
    )
    in_force = [d for d in impl.in_force(device.name) if d.holds_for(sc)] if impl is not None else []
    if in_force:
        console.print(f"[bold]{impl.name}[/], divergences in force: " + ", ".join(d.label() for d in in_force))
    console.print(
        f"iterations {report.iterations}   requests finished {report.finished}/{len(sc.requests)}   "
        f"proposals {report.proposals}" + (f"   scheduled by {_scheduler(report)}" if sc.scheduler != "own" else "")
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
    compared = (
        f"{report.drafts_compared} drafts and {report.steps_compared} steps compared, "
        f"{report.drafts_ambiguous} drafts skipped as near ties, "
        f"{report.drafts_undefined} undefined (read a key no rule defines)"
    )
    if report.scenario.runner_samples:
        compared += f", {report.runner_samples_compared} requests' sampled and booked tokens"
    for d, n in sorted(report.governed.items()):
        compared += f"; {n} values decided by {d}"
    if report.ok:
        console.print(f"[green]mismatches against the reference: 0[/] ({compared})")
    else:
        console.print(f"[red]mismatches against the reference: {len(report.mismatches)}[/] ({compared})")
        for m in report.mismatches[:10]:
            console.print(f"  {m}")


def print_sweep(reports: list[RunReport]) -> None:
    k = max(r.scenario.num_spec_tokens for r in reports)
    table = Table(
        "seed", "iterations", "drafts compared", "undefined", *(f"acc. {p}" for p in range(1, k + 1)), "mismatches"
    )
    for r in reports:
        rates = r.acceptance()
        bad = f"[red]{len(r.mismatches)}[/]" if r.mismatches else "0"
        cells = (f"{rates[p]:.2f}" if p in rates else "-" for p in range(1, k + 1))
        table.add_row(
            str(r.scenario.seed), str(r.iterations), str(r.drafts_compared), str(r.drafts_undefined), *cells, bad
        )
    console.print(table)
    failing = [r for r in reports if not r.ok]
    colour = "red" if failing else "green"
    console.print(f"[{colour}]{len(failing)} of {len(reports)} seeds differ from the reference[/]")


# Scenario.scheduler (another than the loop's own), synchronous or not -> the scheduler that decides
SCHEDULER_NAMES = {
    ("vllm", False): "vLLM's Scheduler",
    ("vllm", True): "vLLM's AsyncScheduler",
    ("balance", False): "vllm-ascend's balance scheduling (its BalanceScheduler)",
    ("balance", True): "vllm-ascend's balance scheduling (vLLM's AsyncScheduler over its BalanceScheduler)",
    ("recompute", False): "vllm-ascend's RecomputeScheduler",
    ("recompute", True): "vllm-ascend's AsyncRecomputeScheduler",
    ("dynamic_batch", False): "vllm-ascend's dynamic batch (its SchedulerDynamicBatch)",
    ("short_request_first", False): "vllm-ascend's ShortRequestFirst order (its BalanceScheduler, balance off)",
    ("short_request_first", True): "vllm-ascend's ShortRequestFirst order (its ShortRequestFirstAsyncScheduler)",
    ("batch_job_aware", False): "vllm-ascend's BatchJobAwareScheduler",
    ("batch_job_aware", True): "vllm-ascend's BatchJobAwareAsyncScheduler",
}


def _scheduler(report: RunReport) -> str:
    """The scheduler that decided the run, and what it did the loop's own never does."""
    name = SCHEDULER_NAMES[report.scenario.scheduler, report.scenario.async_scheduling]
    events = ", ".join(f"{event} {n}" for event, n in sorted(report.scheduler_events.items()) if n) or "nothing else"
    return f"{name}: {events}"
