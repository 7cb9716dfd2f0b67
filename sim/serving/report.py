"""A run's report as data (``--json``) and as a picture (``python -m sim report``).

The JSON holds the figures of the console table, per run, so CI keeps it as an
artifact and a plot is drawn from it later:
``{"format": "mtp-harness-runs/1", "runs": [RUN, ...]}``, one RUN per seed.
The picture (matplotlib, rendered to PNG inside one HTML page) shows the
acceptance rate per draft position and where over the run mismatches happened.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from sim.serving.run import RunReport

FORMAT = "mtp-harness-runs/1"


def run_to_dict(report: RunReport, device: str, impl: str) -> dict:
    """The figures ``python -m sim run`` prints, as plain JSON types."""
    return {
        "device": device,
        "implementation": impl,
        "scenario": asdict(report.scenario),
        "ok": report.ok,
        "iterations": report.iterations,
        "requests": len(report.scenario.requests),
        "finished": report.finished,
        "scheduler_events": dict(sorted(report.scheduler_events.items())),
        "proposals": report.proposals,
        "acceptance": [
            {"position": p, "verified": report.verified[p], "accepted": report.accepted[p], "rate": rate}
            for p, rate in report.acceptance().items()
        ],
        "host_syncs": sum(report.host_syncs.values()),
        "host_sync_sites": [{"op": op, "site": site, "count": n} for (op, site), n in report.host_syncs.most_common()],
        "features": dict(sorted(report.features.items())),
        "drafts_compared": report.drafts_compared,
        "drafts_ambiguous": report.drafts_ambiguous,
        "steps_compared": report.steps_compared,
        "runner_samples_compared": report.runner_samples_compared,
        "values_decided_by": dict(sorted(report.governed.items())),
        "drafts_undefined": report.drafts_undefined,
        "drafts_compared_at": {str(p): n for p, n in sorted(report.drafts_compared_at.items())},
        "mismatches": [
            {"iteration": m.iteration, "request": m.request, "what": m.what, "got": str(m.got), "want": str(m.want)}
            for m in report.mismatches
        ],
    }


def write_json(runs: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "runs": runs}, indent=1) + "\n")
    return path


def load_runs(path: str | Path) -> list[dict]:
    """The runs of a ``--json`` file; ``ValueError`` names the file and what is wrong with it."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        got = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{path}: format={got!r}: expected {FORMAT!r} (written by python -m sim run --json)")
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs:
        raise ValueError(f"{path}: runs={runs!r}: expected a non-empty list")
    return runs


def _figure(runs: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (acc, where) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    verified: dict[int, int] = {}
    accepted: dict[int, int] = {}
    for run in runs:
        for row in run["acceptance"]:
            verified[row["position"]] = verified.get(row["position"], 0) + row["verified"]
            accepted[row["position"]] = accepted.get(row["position"], 0) + row["accepted"]
    positions = sorted(verified)
    rates = [accepted[p] / verified[p] if verified[p] else 0.0 for p in positions]
    acc.bar(positions, rates, color="tab:blue")
    for p, rate in zip(positions, rates):
        acc.annotate(f"{rate:.2f}", (p, rate), ha="center", va="bottom")
    acc.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1.05), xticks=positions)
    acc.set_title(f"acceptance over {len(runs)} run(s)")

    seeds = [run["scenario"]["seed"] for run in runs]
    for row, run in enumerate(runs):
        where.hlines(row, 0, max(run["iterations"] - 1, 0), color="lightgray", linewidth=6)
        per_iteration = Counter(m["iteration"] for m in run["mismatches"])
        its = sorted(per_iteration)
        sizes = [20 + 8 * per_iteration[i] for i in its]  # bigger: more mismatches in that iteration
        where.scatter(its, [row] * len(its), s=sizes, color="tab:red", marker="x", zorder=3)
    where.set(xlabel="iteration", ylabel="seed", yticks=range(len(runs)), yticklabels=[str(s) for s in seeds])
    bad = sum(len(run["mismatches"]) for run in runs)
    where.set_title(f"mismatches against the reference: {bad}")
    if len(runs) > 24:  # many seeds: label a few
        where.set_yticks(range(0, len(runs), max(len(runs) // 12, 1)))
        where.set_yticklabels([str(seeds[i]) for i in range(0, len(runs), max(len(runs) // 12, 1))])
    return fig


def write_html(runs: list[dict], path: str | Path) -> Path:
    """One self-contained HTML page: the figure (PNG inline) and a line per run."""
    buf = io.BytesIO()
    fig = _figure(runs)
    fig.savefig(buf, format="png", dpi=110)
    png = base64.b64encode(buf.getvalue()).decode()
    rows = "".join(
        f"<tr><td>{run['scenario']['seed']}</td><td>{run['iterations']}</td><td>{run['drafts_compared']}</td>"
        f"<td>{run.get('drafts_undefined', 0)}</td>"
        f"<td>{len(run['mismatches'])}</td><td>{html.escape(run['mismatches'][0]['what']) if run['mismatches'] else ''}"
        "</td></tr>"
        for run in runs
    )
    first = runs[0]
    page = (
        "<!doctype html><meta charset='utf-8'><title>mtp-harness run report</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}</style>"
        f"<h1>mtp-harness run report</h1><p>device {html.escape(first['device'])}, implementation "
        f"{html.escape(first['implementation'])}, {len(runs)} run(s)</p>"
        f"<img alt='acceptance per draft position and mismatches over the run' src='data:image/png;base64,{png}'>"
        "<table><tr><th>seed</th><th>iterations</th><th>drafts compared</th><th>drafts undefined</th><th>mismatches</th><th>first</th></tr>"
        f"{rows}</table>"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def explanation_html(found, impl_name: str) -> str:
    """``python -m sim explain``'s findings as a page a maintainer can attach to an upstream report."""
    d = found.divergence
    rows = []
    core, impl = found.core_run.acceptance(), found.impl_run.acceptance()
    for p in sorted(set(core) | set(impl)):
        c, i = core.get(p, 0.0), impl.get(p, 0.0)
        rows.append(f"<tr><td>{p}</td><td>{c:.3f}</td><td>{i:.3f}</td><td>{c - i:+.3f}</td></tr>")
    diffs = (
        []
        if found.under_spec is None
        else [f"<li>{html.escape(str(m))}</li>" for m in found.under_spec.mismatches[:40]]
    )
    case = "no workload searched shows it" if found.case is None else html.escape(found.case.to_json())
    return f"""<!doctype html><meta charset="utf-8"><title>{d.id} ({impl_name})</title>
<h1>{html.escape(d.label())} of {html.escape(impl_name)}</h1>
<p>In <code>{html.escape(d.where)}</code>. The design: {html.escape(d.core)}. {html.escape(impl_name)}: {html.escape(d.impl)}.
Pinned by <code>{html.escape(d.pinned_by)}</code>.</p>
<h2>The smallest case found</h2><pre>{case}</pre>
<h2>What differs from the spec there</h2><ul>{"".join(diffs)}</ul>
<h2>Acceptance per draft position</h2>
<p>A verifier that accepts what a correct proposer drafts (<code>accept=reference</code>), the same workload.</p>
<table border="1"><tr><th>position</th><th>core</th><th>{html.escape(impl_name)}</th><th>lost</th></tr>{"".join(rows)}</table>
"""
