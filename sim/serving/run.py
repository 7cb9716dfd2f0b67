"""Running a scenario end to end: serving loop, proposer, reference, comparison."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from devices.plugins import import_object
from mtp.ops import CoreOps
from mtp.proposer import MtpProposer
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp, TinyTarget
from sim.oracle.cases import to_batch
from sim.oracle.compare import Mismatch
from sim.oracle.coverage import features
from sim.oracle.reference_drafts import ReportedIds
from sim.oracle.rules import CORE, Rules
from sim.serving.acceptance import reference_drafter
from sim.serving.checker import RunChecker
from sim.serving.scenario import Scenario
from sim.serving.simulator import ServingSim, transfer_prompt_kv


@dataclass
class RunReport:
    """What a run did and what it found."""

    scenario: Scenario
    iterations: int = 0
    proposals: int = 0
    finished: int = 0
    verified: Counter = field(default_factory=Counter)  # draft position -> times verified
    accepted: Counter = field(default_factory=Counter)  # draft position -> times accepted
    # under scheduler="vllm": what vLLM's scheduler did that the loop's own never does (preempted, counted
    # ahead, ran after finishing: sim.impls.kit.vllm_schedule.VllmSchedule.events) -> times
    scheduler_events: Counter = field(default_factory=Counter)
    drafts_compared: int = 0
    drafts_ambiguous: int = 0
    steps_compared: int = 0  # model calls whose metadata were compared with the reference
    runner_samples_compared: int = 0  # under runner_samples: requests whose sampled and booked tokens were compared
    governed: Counter = field(default_factory=Counter)  # divergence id -> reference values its rule decided
    drafts_undefined: int = 0  # under a modelled KV defect: drafts that read a key no rule defines (a NaN slot, ...)
    drafts_compared_at: Counter = field(default_factory=Counter)  # draft position -> drafts compared there
    host_syncs: Counter = field(default_factory=Counter)  # (op, site) -> count, where counted
    features: Counter = field(default_factory=Counter)  # sim.oracle.coverage feature -> calls exercising it
    mismatches: list[Mismatch] = field(default_factory=list)
    drafts: list[list[list[int]]] = field(default_factory=list)  # per iteration, per request
    outputs: dict[int, list[int]] = field(default_factory=dict)  # each finished request's tokens, its prompt first
    # (known defect id, SPEC or DEFECT) -> calls that followed the spec for it, or the defect, where it
    # decides a value attention is given (sim.serving.checker.CallCheck.against)
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
        draft_model=scenario.method == "draft_model",
    )
    cache = PagedKvCache(scenario.num_blocks, scenario.block_size, cfg.num_heads, cfg.head_dim, device)
    if poison_kv:
        cache.fill_(float("nan"))
    return TinyMtp(cfg, cache).to(device), TinyTarget(cfg)


def run_scenario(
    scenario: Scenario,
    device,
    impl=None,
    *,
    ops: CoreOps | None = None,
    proposer_cls=None,
    rules: Rules | None = None,
    check: bool = True,
    stop_at_first_mismatch: bool = True,
    poison_kv: bool = True,
    on_iteration=None,
    count_syncs: bool = False,
    scheduler=None,
) -> RunReport:
    """Serve ``scenario`` on ``device`` with ``impl`` (an ``Implementation``: its ops, proposer class,
    rules and divergences; None: the core); with ``check``, compare every call with the reference
    under its rules (``RunChecker``). ``ops``, ``proposer_cls`` and ``rules`` replace the
    implementation's for this run (a broken variant, a wrapped proposer, the spec for a defect).

    ``count_syncs`` counts the host syncs of every propose call into ``host_syncs`` (the CLI's
    report). It is off by default: watching every torch op makes a run about twice as slow, and
    the gate checks syncs on single calls instead (tests/checks/core_checks.py).

    ``scheduler``: the scenario's scheduler (``scheduler_of``) made by the caller, which goes on using it
    after the run (a DP rank, whose engine steps with its peers after its requests are done); None: made here.
    """
    refusal = impl.refuses(scenario, device.name) if impl is not None else None
    if refusal is None and impl is None and scenario.draft_attn_groups > 1:
        refusal = f"draft_attn_groups={scenario.draft_attn_groups}: the core's draft model is one attention layer"
    if refusal is None and impl is None and scenario.draft_attn != "gqa":
        refusal = f"draft_attn={scenario.draft_attn!r}: the core's draft model rotates by its rows' positions"
    if refusal is None and impl is None and scenario.async_scheduling:
        refusal = "async_scheduling=True: the core is the proposer alone: asynchronous scheduling is a model runner's"
    if refusal is None and impl is None and scenario.kernel_block_size:
        refusal = (
            f"kernel_block_size={scenario.kernel_block_size}: the core is the proposer alone: a table of kernel"
            " blocks is a model runner's"
        )
    if refusal is None and impl is None and scenario.runner_samples:
        refusal = (
            "runner_samples=True: the core is the proposer alone: sampling the target's tokens is a model runner's"
        )
    if refusal is not None:
        raise ValueError(refusal)
    ops = ops if ops is not None else getattr(impl, "ops", None)
    proposer_cls = proposer_cls or getattr(impl, "proposer_cls", MtpProposer)
    rules = rules if rules is not None else getattr(impl, "rules", CORE)
    rules = dataclasses.replace(
        rules,
        draft_attn_groups=scenario.draft_attn_groups,
        draft_attn=scenario.draft_attn,
        method=scenario.method,
        graph_mode=scenario.graph_mode,
        dp=scenario.dp,
    )
    divergences = [d for d in impl.in_force(device.name) if d.rule] if impl is not None else []
    for d in [d for d in divergences if not d.holds_for(scenario)]:
        rules = rules.unmodelled(d.id, d.rule)  # e.g. a divergence of other draft attention families
        divergences.remove(d)
    tdev = device.torch_device
    model, target = build_models(scenario, tdev, poison_kv)
    ref_model = build_models(scenario, torch.device("cpu"))[0] if check or scenario.accept == "reference" else None
    if ref_model is not None and rules.sample_report is not None:
        ref_model = ReportedIds(ref_model, rules.sample_report)
    drafter = reference_drafter(ref_model, target, scenario) if scenario.accept == "reference" else None
    transfer = functools.partial(transfer_prompt_kv, model, target, block_size=scenario.block_size)
    sim = ServingSim(
        scenario,
        target,
        drafter,
        transfer if scenario.decode_node else None,
        scheduler if scheduler is not None else scheduler_of(scenario),
    )
    # Capture sizes matter to graph modes only; eager-only adapters take none.
    graphed = scenario.capture_sizes and scenario.graph_mode != "eager"
    sizes = {"capture_sizes": list(scenario.capture_sizes)} if graphed else {}
    if scenario.draft_attn_groups > 1:  # only an implementation that has the feature takes it
        sizes["draft_attn_groups"] = scenario.draft_attn_groups
    if scenario.draft_attn != "gqa":
        sizes["draft_attn"] = scenario.draft_attn
    if scenario.async_scheduling:
        sizes["async_scheduling"] = True
    if scenario.runner_samples:
        sizes["runner_samples"] = True
    if scenario.kernel_block_size:
        sizes["kernel_block_size"] = scenario.kernel_block_size
    proposer = proposer_cls(sim.config, model, device, ops=ops, mode=scenario.graph_mode, **sizes)
    checker = None
    if check:
        proposer.record(True)
        checker = RunChecker(scenario, model, ref_model, target, rules, divergences, proposer.hidden_dtype)
    report = RunReport(scenario)
    for iteration, drafts, syncs in serve(
        sim, proposer, device, scenario, count_syncs, checker and checker.before_propose
    ):
        model.cache.check_bounds()  # a slot past the cache: IndexError after the call, on every device
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
        if checker:
            checker.check(iteration, drafts, proposer, report)
        if on_iteration:
            on_iteration(report, sim, proposer)
        if report.mismatches and stop_at_first_mismatch:
            break
    report.finished, report.outputs = sim.finished, dict(sim.outputs)
    report.scheduler_events.update(getattr(sim.scheduler, "events", {}))
    return report


# Another scheduler than the loop's own, by name (an adapter kit's: found by name, as implementations are)
SCHEDULERS = {
    "vllm": "sim.impls.kit.vllm_schedule:VllmSchedule",
    # vllm-ascend's own, driven as vLLM's is (sim.impls.kit.ascend.schedulers)
    "balance": "sim.impls.kit.vllm_schedule:VllmSchedule",
    "recompute": "sim.impls.kit.vllm_schedule:VllmSchedule",
    "dynamic_batch": "sim.impls.kit.vllm_schedule:VllmSchedule",
    "short_request_first": "sim.impls.kit.vllm_schedule:VllmSchedule",
    "batch_job_aware": "sim.impls.kit.vllm_schedule:VllmSchedule",
}


def scheduler_of(scenario: Scenario):
    """The scheduler deciding the scenario's schedule other than the serving loop's own: vLLM's
    (``scheduler="vllm"``), which needs vLLM installed, or vllm-ascend's own (``balance``, ``recompute``),
    which need vllm-ascend; None for the loop's own."""
    if scenario.scheduler == "own":
        return None
    if importlib.util.find_spec("vllm") is None:
        raise ValueError(
            f"scheduler={scenario.scheduler!r}: vLLM's scheduler needs vLLM installed (an adapter's env: tox -e vllm,"
            " vllm_ascend)"
        )
    return import_object(SCHEDULERS[scenario.scheduler])(scenario)


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
