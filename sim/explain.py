"""What one divergence of an implementation costs: a small case, what differs there, the acceptance lost.

``python -m sim explain ID --impl NAME`` (``sim.cli`` prints it, as text and as an HTML page):

- the smallest workload found (fewest requests, then seeds in order, padded then unpadded) where
  the spec for that behaviour alone (``spec_for``: the implementation's rules with the
  divergence's reverted) differs from what the implementation did, cut after the first
  iteration that shows it, saved as a replay file;
- what differs there: the metadata attention was given against what it should have been given
  (seq_lens, slots, positions), and the drafts against the reference's;
- that the same case matches the implementation's own rules, so nothing else differs;
- acceptance per draft position over a serving run, side by side with the core, under a verifier
  that accepts what a correct proposer drafts (``accept="reference"``, sim/serving/acceptance.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.impls import Implementation, load_implementation
from sim.impls.divergence import Divergence, spec_for
from sim.serving.run import RunReport, run_scenario
from sim.serving.scenario import Scenario, default_scenario

SIZES = (1, 2, 3, 4, 6, 8)
SEEDS = range(12)


@dataclass
class Explanation:
    divergence: Divergence
    case: Scenario | None  # None: no workload searched shows it
    under_spec: RunReport | None  # the case under the spec for this divergence: what differs
    under_rules: RunReport | None  # the case under the implementation's rules: nothing else differs
    impl_run: RunReport  # the acceptance run, by the implementation
    core_run: RunReport  # the same run by the core


def add_parser(sub, formatter_class):
    """The ``explain`` subcommand of ``python -m sim`` (``sim.cli``)."""
    explain = sub.add_parser(
        "explain",
        help="what one divergence of an implementation costs: a case, what differs, acceptance",
        formatter_class=formatter_class,
    )
    explain.add_argument("id", help="the divergence's id (its implementation's table, docs/DIVERGENCES*.md)")
    explain.add_argument("--impl", required=True, help="the implementation whose divergence it is")
    explain.add_argument("--device", default="sim", help="device: sim, cuda, npu, or an installed backend")
    explain.add_argument("--seed", type=int, default=0, help="seed of the acceptance workload")
    explain.add_argument("--html", metavar="OUT", help="the page to write (default: explain-ID.html)")
    return explain


def _run(impl: Implementation, scenario: Scenario, device, rules, stop: bool = True) -> RunReport:
    return run_scenario(scenario, device, impl, rules=rules, stop_at_first_mismatch=stop)


def smallest_case(impl: Implementation, divergence: Divergence, device, k: int = 3) -> Scenario | None:
    """The first workload (fewest requests, then seed, padded then unpadded) where the spec differs, in
    the configuration the divergence needs to show (its ``setting``: an MLA draft, two draft groups)."""
    spec = spec_for(impl.rules, divergence)
    for n in SIZES:
        for seed in SEEDS:
            for padded in (True, False):
                scenario = default_scenario(seed, n, num_spec_tokens=k, block_size=4, padded=padded)
                scenario = dataclasses.replace(scenario, **divergence.setting)
                report = _run(impl, scenario, device, spec)
                if report.mismatches:
                    return dataclasses.replace(scenario, max_iterations=report.mismatches[0].iteration + 1)
    return None


def explain(impl_name: str, divergence_id: str, device, seed: int = 0) -> Explanation:
    """``ValueError`` naming the known ids when ``divergence_id`` is none of the implementation's, and naming
    its pin when no rule models it (a kernel's access, a defect only ranks show): a search would find
    nothing, and the acceptance run would measure the other divergences."""
    impl = load_implementation(impl_name)
    known = {d.id: d for d in impl.divergences}
    if divergence_id not in known:
        raise ValueError(f"{divergence_id!r}: {impl.name} has no such divergence (known: {', '.join(known) or 'none'})")
    d = known[divergence_id]
    if not d.rule:
        raise ValueError(
            f"{divergence_id}: no rule models it in a serving run of one rank, so no case or acceptance of its own"
            f" can be measured here; its pin shows it: {d.pinned_by}"
        )
    case = smallest_case(impl, d, device)
    under_spec = under_rules = None
    if case is not None:
        under_spec = _run(impl, case, device, spec_for(impl.rules, d), stop=False)
        under_rules = _run(impl, case, device, impl.rules, stop=False)
    workload = default_scenario(seed, accept="reference", padded=case.padded if case else True)
    core = load_implementation("core")
    return Explanation(
        d,
        case,
        under_spec,
        under_rules,
        _run(impl, dataclasses.replace(workload, **d.setting), device, impl.rules, stop=False),
        _run(core, workload, device, core.rules, stop=False),  # the setting changes no draft of the spec's
    )
