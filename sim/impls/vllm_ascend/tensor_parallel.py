"""vllm-ascend's drafter on tensor-parallel ranks: every rank serves the same batch, the lm head split.

In a TP deployment every rank of the TP group runs the drafter on the same batch; the draft model's
layers are split over the ranks, and so is its lm head, by vocabulary. What the drafter itself does
differently on TP ranks is how it turns the split logits into draft tokens: the logits all-gathered over
the TP group (vLLM's ``LogitsProcessor._gather_logits``) then ``argmax``, or, under vllm-ascend's
``enable_reduce_sample``, each rank's columns only, reduced by the drafter's own ``greedy_sample`` (each
rank's best value and its global id, all-gathered). So here the draft's lm head is the checkout's
``AscendParallelLMHead`` on each rank with its slice of the tiny lm head (``lmhead_tp.parallel_head``),
its logits the checkout's ``AscendLogitsProcessor``; the rest of the tiny draft is whole on every rank
(its layers' split would gather to the same values; the metadata every rank builds is the same).

Each rank is a process of a ``sim.ranks`` pool (gloo), with vLLM's parallel state for its TP place
(``world.tensor_parallel_world``), running the checkout's drafter through the runner's hand-off as the
single-rank gate does. The spec: every rank drafts what the reference drafts for the batch with its
per-step metadata (the gate's checker, on that rank); every rank issues the same collectives over the
TP group, each named by the functions that issued it (on an NPU a rank at another collective hangs its
peers); and every draft forward is told what a draft's forward is, on every rank alike (``Forward``:
the rows it is handed, its token count, a draft's context, FlashComm1 off where the deployment has it
off: vllm-ascend's draft forwards inheriting the target's sequence parallelism lost acceptance, #13752).

Under ``enable_reduce_sample`` the checkout has the known defect ``reduce-sample-ids-of-a-short-last-shard``
where the vocabulary is not a multiple of 64 (the tiny model's 96 is not): its ranks are held to that
defect's model (``reduce_sample_report``, ``Rules.sample_report``), everything else to the spec; a case
with ``spec=True`` holds them to the spec alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from sim.impls.vllm_ascend import accepted
from sim.impls.vllm_ascend.divergences import ONE_RANK_SAMPLES
from sim.ranks.pool import RankError, RankPool, RankResult
from sim.serving.scenario import Scenario

SERVE = "sim.impls.vllm_ascend.tensor_parallel:serve_tp"
REDUCE_SAMPLE_DEFECT = "reduce-sample-ids-of-a-short-last-shard"
EAGLE_LOCAL_ARGMAX = "eagle-reduce-sample-drafts-each-ranks-own-argmax"  # v0.22.1rc's (branch_divergences.V0_22)
VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE: a split lm head's vocabulary is padded to a multiple of it


def reduce_sample_report(vocab_size: int, size: int) -> tuple[int, ...] | None:
    """For each token id, the id vllm-ascend's reduce-sample ``greedy_sample`` reports when it is the
    argmax on ``size`` TP ranks (``reduce-sample-ids-of-a-short-last-shard``): rank r holds the ids of its
    ``vocab_slice``, ``n_r`` of them, and reports ``local + r * n_r``. None where every rank's ids are
    reported as themselves (a vocabulary that is a multiple of 64)."""
    report = []
    for r in range(size):
        ids = vocab_slice(vocab_size, r, size)
        report += [t - ids.start + r * (ids.stop - ids.start) for t in range(ids.start, ids.stop)]
    return None if report == list(range(vocab_size)) else tuple(report)


def local_argmax_report(vocab_size: int, rank: int, size: int) -> tuple[int, ...]:
    """For each token id, the draft an EAGLE-1 drafter under reduce sampling reports on TP rank ``rank``
    of ``size`` (v0.22.1rc's ``eagle-reduce-sample-drafts-each-ranks-own-argmax``): the argmax of the
    rank's own columns, as an index into them; another rank's id never (-1)."""
    ids = vocab_slice(vocab_size, rank, size)
    return tuple(t - ids.start if ids.start <= t < ids.stop else -1 for t in range(vocab_size))


def vocab_slice(vocab_size: int, rank: int, size: int) -> slice:
    """The ids rank ``rank`` of ``size`` holds of a vocabulary split as vLLM splits it (padded to a
    multiple of 64, then evenly): its real ones."""
    width = -(-vocab_size // VOCAB_PADDING) * VOCAB_PADDING // size
    return slice(min(rank * width, vocab_size), min((rank + 1) * width, vocab_size))


@dataclass
class TpCase:
    """What ``size`` TP ranks run: one scenario (a dict of ``Scenario``, served whole by every rank), with
    vllm-ascend's ``enable_reduce_sample`` or without. ``setup``: e.g. a changed vllm-ascend applied in
    each rank for this case (the function returns what undoes it, or None)."""

    scenario: dict
    reduce_sample: bool = False
    setup: tuple[str, ...] = ()  # ("module:function", *args): what each rank calls before serving it
    spec: bool = False  # the ranks held to the spec, the known reduce-sample defect not modelled
    size: int = 2
    divergences: tuple[str, ...] | None = None  # the ids the ranks accept (``accepted``); None: every one

    @classmethod
    def of(
        cls,
        scenario: Scenario,
        reduce_sample: bool = False,
        setup: tuple[str, ...] = (),
        spec: bool = False,
        size: int = 2,
        divergences: tuple[str, ...] | None = None,
    ) -> TpCase:
        if scenario.tp != 1 or scenario.dp != 1:
            raise ValueError(
                f"tp_ranks with tp={scenario.tp}, dp={scenario.dp}: every TP rank serves the scenario whole"
                " (its own tp and dp are 1); tp_size is the TP size"
            )
        if type(size) is not int or size < 2:
            raise ValueError(f"tp_size={size!r}: a TP case has at least two ranks")
        if scenario.runner_samples:
            raise ValueError(f"tp_ranks with runner_samples=True: {ONE_RANK_SAMPLES}")
        slices = [vocab_slice(scenario.vocab_size, r, size) for r in range(size)]
        empty = [r for r, ids in enumerate(slices) if ids.stop == ids.start]
        if reduce_sample and empty:
            raise ValueError(
                f"reduce_sample with vocab_size={scenario.vocab_size} on {size} ranks: rank {empty[0]} holds none of"
                " its ids (vLLM pads the vocabulary to a multiple of 64 and splits that evenly), and vllm-ascend's"
                " reduction takes the max over each rank's columns"
            )
        return cls(dataclasses.asdict(scenario), reduce_sample, setup, spec, size, divergences)

    def save(self, path: str | Path) -> Path:
        """The case as a replay file (``python -m sim replay PATH --impl vllm_ascend``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {"tp_ranks": self.scenario, "tp_size": self.size, "reduce_sample": self.reduce_sample}
        saved |= accepted.saved(self.divergences)
        path.write_text(json.dumps(saved, indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: dict) -> TpCase:
        """The case a replay file's ``{"tp_ranks": {...}}`` describes; ``ValueError`` names the field."""
        spec = data.get("tp_ranks")
        if not isinstance(spec, dict):
            raise ValueError(f"tp_ranks={spec!r}: expected the scenario every TP rank serves")
        reduce = data.get("reduce_sample", False)
        if type(reduce) is not bool:
            raise ValueError(f"reduce_sample={reduce!r}: expected true or false")
        try:
            scenario = Scenario.from_dict(spec)
        except ValueError as exc:
            raise ValueError(f"tp_ranks: {exc}") from None
        return cls.of(scenario, reduce, size=data.get("tp_size", 2), divergences=accepted.divergence_ids(data))


@dataclass(frozen=True)
class TpSampleCase:
    """A verification batch (``sim.oracle.rejection.Verification``: greedy requests, random ones or both)
    that ``size`` TP ranks score with vllm-ascend's rejection sampler under ``enable_reduce_sample``, each
    rank holding its slice of the target's logits (vLLM's split: the vocabulary padded to a multiple of 64,
    split evenly); every rank's random draws seeded with ``seed``, as vLLM seeds every worker alike."""

    verification: object
    size: int = 2
    setup: tuple[str, ...] = ()  # as ``TpCase.setup``
    seed: int = 0


@dataclass(frozen=True)
class Forward:
    """What one draft forward's context tells the model on a TP rank."""

    rows: int  # the rows the model was handed
    num_tokens: int  # the context's token count
    draft: bool  # ``is_draft_model``
    flash_comm: bool  # FlashComm1 (sequence parallelism over the TP ranks) on

    @classmethod
    def of(cls, context, rows: int) -> Forward:
        flash = bool(getattr(context, "flash_comm_v1_enabled", False))  # main: no such flag, FlashComm1 removed
        return cls(rows, int(getattr(context, "num_tokens", rows) or 0), bool(context.is_draft_model), flash)

    def problem(self) -> str | None:
        """Why this forward is not a draft's of a deployment without FlashComm1, or None."""
        if not self.draft:
            return f"{self}: not told it is a draft's forward (is_draft_model False)"
        if self.flash_comm:
            return f"{self}: told FlashComm1 is on, in a deployment without it (its rows would be split over the ranks)"
        return None

    def __str__(self) -> str:
        return f"{self.rows} rows, {self.num_tokens} tokens, draft {self.draft}, FlashComm1 {self.flash_comm}"


@dataclass
class TpRankResult(RankResult):
    problems: list[str] = field(default_factory=list)  # this rank's differences from the reference
    sites: list[str] = field(default_factory=list)  # its collectives over the TP group, by issuer, in order
    rows: list[list[int]] = field(default_factory=list)  # a sample case's output rows
    forwards: list[Forward] = field(default_factory=list)  # a serving case's draft forwards, in order


def serve_tp(case: TpCase | TpSampleCase, rank: int, size: int, device) -> TpRankResult:
    """One TP rank's run of ``case`` (the pool's serve function): a serving run, or a verification batch scored."""
    from devices.plugins import import_object
    from sim.impls.kit.ascend import world
    from sim.impls.kit.ascend.importing import import_ascend

    undo = None
    result = TpRankResult(rank)
    try:
        world.tensor_parallel_world(rank, size)
        # vLLM's device communicator gathers with torch's all_gather_into_tensor, which warns on every call
        warnings.filterwarnings("ignore", message=".*all_gather_into_tensor.*deprecated", category=FutureWarning)
        world.forget_model_facts()  # each case is a server of its own drafter
        if case.setup:
            undo = import_object(case.setup[0])(*case.setup[1:])
        group = import_ascend("vllm.distributed.parallel_state").get_tp_group()
        if isinstance(case, TpSampleCase):
            with reduce_sample(True), named_collectives(group, result.sites):
                result.rows = _sampled_on_rank(case.verification, rank, size, case.seed)
        else:
            with reduce_sample(case.reduce_sample), named_collectives(group, result.sites):
                report = _served_on_rank(case, rank, size, device, result.forwards)
            result.drafts, result.problems = report.drafts, [str(m) for m in report.mismatches[:4]]
        result.collectives = len(result.sites)
        return result
    except RankError:
        raise
    except Exception as exc:
        frames = "".join(traceback.format_tb(exc.__traceback__)[-5:])
        where = f"after the TP collectives {result.sites}"
        raise RankError(f"{where}: {type(exc).__name__}: {exc}\n{frames}", len(result.sites), "crash") from exc
    finally:
        if undo is not None:
            undo()


def _served_on_rank(case: TpCase, rank: int, size: int, device, forwards: list[Forward]):
    """The case's serving run on this rank, checked against the reference, its draft forwards recorded in
    ``forwards``; under reduce sampling, with a known defect's ids modelled where the implementation lists
    it (``reported_ids``)."""
    from sim.serving.run import run_scenario

    scenario, impl = Scenario.from_dict(case.scenario), accepted.implementation_accepting(case.divergences)
    shown = reported_ids(case, scenario, {d.id for d in impl.divergences}, rank, size)

    class Recorded(impl.proposer_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.model.on_forward = lambda context, rows: forwards.append(Forward.of(context, rows))

    rules = dataclasses.replace(impl.rules, sample_report=shown)
    return run_scenario(scenario, device, impl, proposer_cls=Recorded, rules=rules)


def reported_ids(case: TpCase, scenario: Scenario, accepted_ids: set[str], rank: int, size: int):
    """What the drafter's sampling reports for each id on this rank under a known defect the ranks accept
    (``Rules.sample_report``): an EAGLE-1 drafter's own columns (``local_argmax_report``), or the short last
    shard's ids (``reduce_sample_report``); None where the ranks are held to the spec."""
    if not case.reduce_sample or case.spec:
        return None
    if _own_columns(case, scenario, accepted_ids):
        return local_argmax_report(scenario.vocab_size, rank, size)
    return reduce_sample_report(scenario.vocab_size, size) if REDUCE_SAMPLE_DEFECT in accepted_ids else None


def _own_columns(case: TpCase, scenario: Scenario, accepted_ids: set[str]) -> bool:
    """Whether the ranks' drafts are modelled as their own columns' argmax (an EAGLE-1 drafter under reduce
    sampling where ``eagle-reduce-sample-drafts-each-ranks-own-argmax`` is accepted): no collective."""
    modelled = case.reduce_sample and not case.spec and EAGLE_LOCAL_ARGMAX in accepted_ids
    return modelled and scenario.method == "eagle"


def _sampled_on_rank(v, rank: int, size: int, seed: int) -> list[list[int]]:
    """The checkout's rejection sampler's rows for ``v`` on this TP rank, handed its slice of the target's
    logits, on the proposer's device with vllm-ascend's config of the deployment (the sampler reads it),
    its random draws seeded with ``seed``."""
    import torch

    from sim.impls.kit.ascend import world
    from sim.impls.vllm_ascend import rejection

    world.vllm_config(32)
    torch.default_generator.manual_seed(seed)  # the CPU's draws: torch.manual_seed would seed the fake NPU too
    own = v.target_logits[:, vocab_slice(v.target_logits.shape[-1], rank, size)].contiguous()
    return rejection.sample(dataclasses.replace(v, target_logits=own), world.build_device()).rows


@contextlib.contextmanager
def reduce_sample(on: bool):
    """Inside, vllm-ascend's ``enable_reduce_sample`` as ``on`` says: in the proposers built inside
    (``world.deployed``) and in the current config (a proposer built before, in this rank process,
    reads it when it samples)."""
    from sim.impls.kit.ascend import world
    from sim.impls.kit.ascend.importing import import_ascend
    from sim.impls.vllm_ascend import generation

    if on and not generation.has_reduce_sample():  # setting it would be read by nothing: refused, not dropped
        raise ValueError(
            "reduce_sample=True: this checkout has no reduce sampling (its AscendConfig has no enable_reduce_sample)"
        )
    configs = import_ascend("vllm_ascend.ascend_config")
    with world.deployed({"enable_reduce_sample": True} if on else {}):
        if configs._ASCEND_CONFIG is not None:
            configs._ASCEND_CONFIG.enable_reduce_sample = on
        try:
            yield
        finally:
            if configs._ASCEND_CONFIG is not None:
                configs._ASCEND_CONFIG.enable_reduce_sample = False  # off, as outside any reduce-sample case


@contextlib.contextmanager
def named_collectives(group, sites: list[str]):
    """Every all-gather and all-reduce of vLLM's ``group`` named in ``sites`` by the two functions that
    issued it (e.g. ``compute_logits > _gather_logits``). vLLM's collective custom ops are registered for
    the NPU's dispatch key; on the simulator's CPU tensors the group calls its device communicator directly."""
    group.use_custom_op_call = False
    originals = {name: getattr(group, name) for name in ("all_gather", "all_reduce")}

    def named(name):
        def collective(*args, **kwargs):
            caller = sys._getframe(1)
            sites.append(f"{caller.f_back.f_code.co_name} > {caller.f_code.co_name}: {name}")
            return originals[name](*args, **kwargs)

        return collective

    for name in originals:
        setattr(group, name, named(name))
    try:
        yield sites
    finally:
        for name in originals:
            delattr(group, name)


class TpPool(RankPool):
    """``size`` TP ranks on the simulator, serving ``TpCase``s."""

    def __init__(self, size: int, divergences: tuple[str, ...] | None = None, **timeouts):
        super().__init__(size, SERVE, "sim", **timeouts)
        self.preload = ("sim.impls.vllm_ascend.rank_preload",)
        self.divergences = divergences  # what a case that names none accepts (``accepted``); None: every one


def check_tp_sample(case: TpSampleCase, pool: TpPool, report: tuple[int, ...] | None = None) -> list[str]:
    """Problems found scoring ``case`` on ``pool``'s ranks (``sample_problems``)."""
    if case.size != pool.size:
        raise ValueError(f"tp_size={case.size}: a case for a pool of {pool.size} TP ranks")
    return sample_problems(case, pool.run(case), report)


def sample_problems(case: TpSampleCase, results: list[TpRankResult], report: tuple[int, ...] | None = None):
    """What is wrong with the ranks' rows for ``case``: a greedy request's row other than the reference's
    (``report``: a known defect's ids, as ``Rules.sample_report``); a random request's row that no
    rejection sampler gives, or other than rank 0's (ranks that sample differently leave the TP group
    with different tokens); then the ranks' collectives."""
    from sim.oracle.reference_drafts import reported_logits
    from sim.oracle.rejection import greedy_rows, row_is_well_formed

    v = case.verification
    if report is not None:
        v = dataclasses.replace(v, target_logits=reported_logits(v.target_logits, report))
    want = greedy_rows(v)
    problems = []
    for r in results:
        for i, (got, row) in enumerate(zip(r.rows, want, strict=True)):
            said = f"rank {r.rank}: request {i} (drafts {list(v.drafts[i])}, temperature {v.temperature[i]})"
            if v.temperature[i] == 0 and got != row:
                problems.append(f"{said}: got {got}, want {row}")
            elif v.temperature[i] != 0 and (wrong := row_is_well_formed(got, v.drafts[i])):
                problems.append(f"{said}: {wrong}")
            elif got != results[0].rows[i]:
                problems.append(f"{said}: got {got}, rank 0 {results[0].rows[i]}")
    return problems[:4] + _collective_problems(results, len(results))


def check_tp(case: TpCase, pool: TpPool) -> list[str]:
    """Problems found running ``case`` on ``pool``'s ranks: each rank's differences from the reference,
    then the first collective at which the ranks differ."""
    if case.size != pool.size:
        raise ValueError(f"tp_size={case.size}: a case for a pool of {pool.size} TP ranks")
    case = accepted.accepted_by(case, pool.divergences)
    results = pool.run(case)
    problems = [f"rank {r.rank}: {p}" for r in results for p in r.problems[:1]]
    accepted_ids = {d.id for d in accepted.implementation_accepting(case.divergences).divergences}
    local = _own_columns(case, Scenario.from_dict(case.scenario), accepted_ids)
    return problems + _forward_problems(results) + _collective_problems(results, pool.size, none_expected=local)


def _forward_problems(results: list[TpRankResult]) -> list[str]:
    """The first draft forward that is not a draft's of this deployment, or at which the ranks differ."""
    for i, per_rank in enumerate(zip(*(r.forwards for r in results))):
        wrong = next((f"rank {r.rank}: {p}" for r, f in zip(results, per_rank) if (p := f.problem())), None)
        if wrong:
            return [f"draft forward {i}: {wrong}"]
        if len(set(per_rank)) > 1:
            said = "; ".join(f"rank {r.rank}: {f}" for r, f in zip(results, per_rank))
            return [f"draft forward {i}: the ranks were told different things: {said}"]
    counts = {r.rank: len(r.forwards) for r in results}
    if len(set(counts.values())) > 1:
        return [f"the ranks ran different numbers of draft forwards: {counts}"]
    if not any(counts.values()):
        return ["no draft forward was recorded on any rank"]
    return []


def _collective_problems(results: list[TpRankResult], size: int, none_expected: bool = False) -> list[str]:
    """The first collective at which the ranks differ, their counts where they differ, none at all (unless
    a known defect issues none: ``none_expected``)."""
    problems = []
    for i, per_rank in enumerate(zip(*(r.sites for r in results))):
        if len(set(per_rank)) > 1:
            said = "; ".join(f"rank {r.rank}: {site}" for r, site in zip(results, per_rank))
            problems.append(f"TP collective {i}: the ranks issued different collectives: {said}")
            break
    counts = {r.rank: len(r.sites) for r in results}
    if len(set(counts.values())) > 1:
        problems.append(f"the ranks issued different numbers of TP collectives: {counts}")
    if not any(r.sites for r in results) and not none_expected:
        problems.append(f"no rank issued a collective over the TP group of {size}: the lm head is not split")
    return problems
