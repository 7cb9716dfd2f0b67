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
from sim.oracle.governed import governed_values
from sim.oracle.rules import CORE, Rules
from sim.serving.acceptance import reference_drafter
from sim.serving.scenario import Scenario
from sim.serving.simulator import ServingSim


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
    kv = _KvWatch(model.cache) if check and is_modelled(rules, scenario.padded) else None
    for iteration, drafts, syncs in serve(sim, proposer, device, scenario, count_syncs, kv and kv.before_propose):
        it = iteration.index
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
            captured = proposer.captured_sizes()
            report.mismatches += compare_trace(it, iteration.case, scenario.padded, proposer.trace, captured, rules)
            report.steps_compared += len(proposer.trace)
            for d in divergences:
                report.governed[d.id] += governed_values(iteration.case, scenario.padded, rules, d.rule)
            before = kv and kv.state
            got = compare_iteration_drafts(iteration, drafts, ref_model, target, scenario, tol, rules, before)
            report.mismatches += got.mismatches
            report.drafts_compared += got.compared
            report.drafts_ambiguous += got.ambiguous
            report.drafts_undefined += got.undefined
            report.drafts_compared_at.update(got.compared_at)
            if kv:
                kv.after_call(iteration.case, scenario.padded, rules)
        if on_iteration:
            on_iteration(report, sim, proposer)
        if report.mismatches and stop_at_first_mismatch:
            break
    report.finished = sim.finished
    return report


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
