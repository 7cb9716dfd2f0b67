"""Every comparison a serving run's calls go through, in one place: a new check is added here.

``RunChecker`` holds what a run is compared under (the implementation's rules, the divergences whose
decided values are counted) and the reference's side (the CPU reference model, the target, the
defect model's view of the KV cache). For each propose call ``CallCheck`` compares the call's
metadata (the trace of what attention and the model were given: ``sim.oracle.compare.compare_trace``)
and its drafts (``compare_iteration_drafts``) under the rules, where a known defect is an alternative
to the spec, never the expectation (``Rules.defects``); the checker then counts what each divergence
decided (``sim.oracle.governed``) and what the call followed, into the run's report. Under
asynchronous scheduling it also compares what the runner hands its next step (``sim.oracle.next_step``);
where the runner samples, what it sampled and holds (``sim.oracle.runner_samples``).
"""

from __future__ import annotations

from collections import Counter

from sim.oracle import next_step, runner_samples
from sim.oracle.compare import (
    MARGIN_TOLERANCE,
    KvBefore,
    Mismatch,
    compare_iteration_drafts,
    compare_trace,
    first_pass_slots,
    misplaced_writes,
    replays_graph,
    steps_replay_graph,
)
from sim.oracle.defect_drafts import is_modelled
from sim.oracle.governed import decides, governed_by
from sim.oracle.rules import Rules

SPEC, DEFECT = "spec", "defect"  # what a call followed where a known defect decides a value


class RunChecker:
    """A serving run's comparisons with the reference, call by call, under ``rules``; ``divergences``
    (each with an ``id`` and the ``rule`` fields modelling it) get the count of values they decided."""

    def __init__(self, scenario, model, ref_model, target, rules: Rules, divergences, hidden_dtype):
        self.scenario, self.ref_model, self.target = scenario, ref_model, target
        self.rules, self.divergences = rules, divergences
        self.tolerance = MARGIN_TOLERANCE[hidden_dtype]
        modelled = is_modelled(rules, scenario.padded) or _any_alternative_modelled(rules, scenario.padded)
        self.kv = _KvWatch(model.cache) if modelled else None

    def before_propose(self, iteration) -> None:
        if self.kv:
            self.kv.before_propose(iteration)

    def check(self, iteration, drafts, proposer, report) -> None:
        """Compare one call, adding its mismatches and counts to ``report``."""
        padded = self.scenario.padded
        call = CallCheck(
            iteration, drafts, proposer, self.ref_model, self.target, self.scenario, self.tolerance,
            self.kv and self.kv.state,
        )  # fmt: skip
        rules = self.rules.for_call(
            lambda: replays_graph(iteration.case, padded, call.captured, self.rules),
            lambda: steps_replay_graph(iteration.case, call.captured),
        )
        followed, got, mismatches = call.against(rules)
        in_effect = followed_rules(rules, followed)
        if self.scenario.runner_samples:  # what the runner sampled and holds: the drafter's input, first
            # a runner that books its samples on the device (an MRV2 runner's) holds them, not placeholders
            placeholders = self.scenario.async_scheduling and not getattr(proposer, "books_on_the_device", False)
            report.mismatches += runner_samples.compare(
                iteration.index, iteration.case, proposer.runner_sampled, placeholders
            )
            report.runner_samples_compared += len(iteration.case.requests)
        report.mismatches += mismatches
        # what the runner hands its next step: under asynchronous scheduling, or at every step where the runner
        # hands it on the same way in both (``hands_on_every_step``: an MRV2 runner's device-kept counts)
        if self.scenario.async_scheduling or getattr(proposer, "hands_on_every_step", False):
            report.mismatches += next_step.compare(iteration.index, iteration.case, proposer.handed_on, drafts)
        report.followed.update(followed)
        report.steps_compared += len(proposer.trace)
        report.governed.update(governed_by(iteration.case, padded, in_effect, {d.id: d.rule for d in self.divergences}))
        report.drafts_compared += got.compared
        report.drafts_ambiguous += got.ambiguous
        report.drafts_undefined += got.undefined
        report.drafts_compared_at.update(got.compared_at)
        if self.kv:
            self.kv.after_call(iteration.case, padded, in_effect)


def _any_alternative_modelled(rules: Rules, padded: bool) -> bool:
    return any(is_modelled(alt, padded) for _, alt in rules.alternatives([d for d, _ in rules.defects]))


def followed_rules(rules: Rules, followed: Counter) -> Rules:
    """``rules`` with the defects a call followed the spec for no longer modelled."""
    return _without(rules, {defect for defect, what in followed if what == SPEC})


def _without(rules: Rules, defects) -> Rules:
    for defect in defects:
        rules = rules.without(defect)
    return rules


class CallCheck:
    """One propose call against the reference: its metadata (the trace of what attention and the model
    were given) and its drafts, under an implementation's rules, where a known defect is an alternative
    to the spec, never the expectation (``Rules.defects``)."""

    def __init__(self, iteration, drafts, proposer, ref_model, target, scenario, tolerance, kv):
        self.iteration, self.drafts, self.ref_model, self.target = iteration, drafts, ref_model, target
        self.scenario, self.tolerance, self.kv = scenario, tolerance, kv
        self.trace, self.captured = proposer.trace, proposer.captured_sizes()

    def metadata(self, rules: Rules) -> list[Mismatch]:
        it = self.iteration
        return compare_trace(it.index, it.case, self.scenario.padded, self.trace, self.captured, rules)

    def compared(self, rules: Rules):
        got = compare_iteration_drafts(
            self.iteration, self.drafts, self.ref_model, self.target, self.scenario, self.tolerance, rules, self.kv
        )
        return got, self.metadata(rules) + got.mismatches

    def against(self, rules: Rules) -> tuple[Counter, object, list[Mismatch]]:
        """(what the call followed: (defect id, SPEC or DEFECT) -> 1, the drafts' comparison, mismatches).

        A call that matches ``rules`` followed each defect that decides a value it hands attention
        (where the spec's metadata differs from the defect's); one that does not is compared under the
        alternatives (the spec for each such defect, then for all of them); if none matches, the
        mismatches name what each alternative expected, so a half fix reads as one."""
        case, padded = self.iteration.case, self.scenario.padded
        deciding = [d for d, fields in rules.defects if decides(case, padded, rules, fields, longest=False)]
        got, mismatches = self.compared(rules)
        if not mismatches:
            return Counter({(d, DEFECT): 1 for d in deciding if self.metadata(rules.without(d))}), got, mismatches
        tried = [("the defects modelled", got, mismatches)]
        for fixed, alternative in rules.alternatives(deciding):
            alt_got, alt_mismatches = self.compared(alternative)
            if not alt_mismatches:
                # Credited: each defect taken as fixed whose own values would have shown (with the others
                # fixed, its rule restored differs), and each other deciding defect whose spec differs.
                spec = [d for d in fixed if len(fixed) == 1 or self.metadata(_without(rules, set(fixed) - {d}))]
                held = [d for d in deciding if d not in fixed and self.metadata(alternative.without(d))]
                return Counter({**{(d, SPEC): 1 for d in spec}, **{(d, DEFECT): 1 for d in held}}), alt_got, []
            tried.append(("the spec for " + ", ".join(fixed), alt_got, alt_mismatches))
        if len(tried) == 1:
            return Counter(), got, mismatches
        # Nothing matches: the nearest expectation's mismatches, then what each other one wanted first.
        tried.sort(key=lambda t: len(t[2]))
        (label, got, mismatches), others = tried[0], tried[1:]
        named = [m._replace(what=f"{m.what} (under {label})") for m in mismatches]
        named += [m._replace(what=f"{m.what} (under {other})", also=True) for other, _, ms in others for m in ms[:1]]
        return Counter(), got, named


class _KvWatch:
    """The paged cache as the defect model reads it (``sim.oracle.defect_drafts``): a copy taken before
    each propose call, and the slots earlier calls' misplaced writes left clobbered (from the rules'
    slots, never from the proposer's trace)."""

    def __init__(self, cache):
        self.cache = cache
        self.clobbered: frozenset[int] = frozenset()
        self.state: KvBefore | None = None

    def before_propose(self, _iteration) -> None:
        k, v = self.cache.k.detach().cpu().clone(), self.cache.v.detach().cpu().clone()
        self.state = KvBefore(k, v, self.clobbered)

    def after_call(self, case, padded: bool, rules: Rules) -> None:
        rewritten = first_pass_slots(case, padded, rules)
        self.clobbered = frozenset((self.clobbered - rewritten) | misplaced_writes(case, padded, rules))
