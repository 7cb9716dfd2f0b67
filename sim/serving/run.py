"""Running a scenario end to end: serving loop, proposer, reference, comparison."""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from mtp.ops import CoreOps
from mtp.proposer import MtpProposer
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp, TinyTarget
from sim.oracle.cases import to_batch
from sim.oracle.compare import (
    MARGIN_TOLERANCE,
    KvBefore,
    Mismatch,
    compare_iteration_drafts,
    compare_trace,
    first_pass_slots,
    misplaced_writes,
)
from sim.oracle.coverage import features
from sim.oracle.defect_drafts import is_modelled
from sim.oracle.governed import decides, governed_values
from sim.oracle.rules import CORE, Rules
from sim.serving.acceptance import reference_drafter
from sim.serving.scenario import Scenario
from sim.serving.simulator import ServingSim

SPEC, DEFECT = "spec", "defect"  # what a call followed where a known defect decides a value


@dataclass
class RunReport:
    """What a run did and what it found."""

    scenario: Scenario
    iterations: int = 0
    proposals: int = 0
    finished: int = 0
    verified: Counter = field(default_factory=Counter)  # draft position -> times verified
    accepted: Counter = field(default_factory=Counter)  # draft position -> times accepted
    drafts_compared: int = 0
    drafts_ambiguous: int = 0
    steps_compared: int = 0  # model calls whose metadata were compared with the reference
    governed: Counter = field(default_factory=Counter)  # divergence id -> reference values its rule decided
    drafts_undefined: int = 0  # under a modelled KV defect: drafts that read a key no rule defines (a NaN slot, ...)
    drafts_compared_at: Counter = field(default_factory=Counter)  # draft position -> drafts compared there
    host_syncs: Counter = field(default_factory=Counter)  # (op, site) -> count, where counted
    features: Counter = field(default_factory=Counter)  # sim.oracle.coverage feature -> calls exercising it
    mismatches: list[Mismatch] = field(default_factory=list)
    drafts: list[list[list[int]]] = field(default_factory=list)  # per iteration, per request
    # (known defect id, SPEC or DEFECT) -> calls that followed the spec for it, or the defect, where it
    # decides a value attention is given (CallCheck.against)
    followed: Counter = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def acceptance(self) -> dict[int, float]:
        return {p: self.accepted[p] / n for p, n in sorted(self.verified.items()) if n}


def build_models(scenario: Scenario, device: torch.device, poison_kv: bool = True):
    """The scenario's draft model (with its paged cache) and target model.

    With ``poison_kv`` the cache starts as NaN, so reading a slot nobody wrote
    poisons the drafts; without it, stale zeros must be caught by sensitivity.
    """
    cfg = TinyConfig(
        vocab_size=scenario.vocab_size,
        hidden_size=scenario.hidden_size,
        seed=scenario.seed,
        mrope=scenario.mrope,
        eagle3=scenario.method == "eagle3",
    )
    cache = PagedKvCache(scenario.num_blocks, scenario.block_size, cfg.num_heads, cfg.head_dim, device)
    if poison_kv:
        cache.fill_(float("nan"))
    return TinyMtp(cfg, cache).to(device), TinyTarget(cfg)


def run_scenario(
    scenario: Scenario,
    device,
    ops: CoreOps | None = None,
    check: bool = True,
    stop_at_first_mismatch: bool = True,
    poison_kv: bool = True,
    proposer_cls=None,
    on_iteration=None,
    rules: Rules = CORE,
    count_syncs: bool = False,
    divergences=(),
) -> RunReport:
    """Serve ``scenario`` on ``device``; with ``check``, compare every call with the reference
    (under ``rules``: the implementation's documented divergences; ``divergences``, each with an
    ``id`` and the ``rule`` fields modelling it, get the count of values they decided).

    ``count_syncs`` counts the host syncs of every propose call into ``host_syncs`` (the CLI's
    report). It is off by default: watching every torch op makes a run about twice as slow, and
    the gate checks syncs on single calls instead (tests/checks/core_checks.py).
    """
    tdev = device.torch_device
    model, target = build_models(scenario, tdev, poison_kv)
    ref_model = build_models(scenario, torch.device("cpu"))[0] if check or scenario.accept == "reference" else None
    drafter = reference_drafter(ref_model, target, scenario) if scenario.accept == "reference" else None
    sim = ServingSim(scenario, target, drafter)
    # Capture sizes matter to graph modes only; eager-only adapters take none.
    graphed = scenario.capture_sizes and scenario.graph_mode != "eager"
    sizes = {"capture_sizes": list(scenario.capture_sizes)} if graphed else {}
    proposer = (proposer_cls or MtpProposer)(sim.config, model, device, ops=ops, mode=scenario.graph_mode, **sizes)
    if check:
        proposer.record(True)
    report = RunReport(scenario)
    tol = MARGIN_TOLERANCE[proposer.hidden_dtype]
    defect_model = check and (is_modelled(rules, scenario.padded) or _any_alternative_modelled(rules, scenario.padded))
    kv = _KvWatch(model.cache) if defect_model else None
    for iteration, drafts, syncs in serve(sim, proposer, device, scenario, count_syncs, kv and kv.before_propose):
        if syncs is not None:
            report.host_syncs.update(syncs.counts)
        report.drafts.append(drafts)
        report.iterations += 1
        report.features.update(features(iteration.case))
        report.proposals += len(drafts)
        for verified, accepted in iteration.accepted:
            for p in range(1, verified + 1):
                report.verified[p] += 1
                report.accepted[p] += p <= accepted
        if check:
            call = CallCheck(iteration, drafts, proposer, ref_model, target, scenario, tol, kv and kv.state)
            followed, got, mismatches = call.against(rules)
            report.mismatches += mismatches
            report.followed.update(followed)
            report.steps_compared += len(proposer.trace)
            for d in divergences:
                report.governed[d.id] += governed_values(
                    iteration.case, scenario.padded, followed_rules(rules, followed), d.rule
                )
            report.drafts_compared += got.compared
            report.drafts_ambiguous += got.ambiguous
            report.drafts_undefined += got.undefined
            report.drafts_compared_at.update(got.compared_at)
            if kv:
                kv.after_call(iteration.case, scenario.padded, followed_rules(rules, followed))
        if on_iteration:
            on_iteration(report, sim, proposer)
        if report.mismatches and stop_at_first_mismatch:
            break
    report.finished = sim.finished
    return report


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


def serve(sim: ServingSim, proposer, device, scenario: Scenario, count_syncs: bool = False, before_propose=None):
    """Yield ``(iteration, drafts, host syncs)`` for each propose call of a serving run
    (the syncs a ``SyncLog`` with ``count_syncs``, else None). ``before_propose(iteration)`` is
    called just before each call (the defect model's copy of the cache).

    The drafts (host lists) go back to the serving loop once the consumer
    resumes the generator, so it can inspect the proposer's trace first.
    """
    tdev = device.torch_device
    for it in range(scenario.max_iterations):
        if sim.done:
            return
        iteration = sim.step(it)
        if iteration is None:
            continue
        batch, sampled = to_batch(iteration.case, tdev, scenario.padded, iteration.hidden.to(tdev))
        if before_propose:
            before_propose(iteration)
        with device.watch_host_syncs() if count_syncs else nullcontext() as syncs:
            drafts = proposer.propose(batch, sampled)
        drafts = proposer.drafts_to_host(drafts)
        yield iteration, drafts, syncs
        sim.commit(iteration, drafts)
