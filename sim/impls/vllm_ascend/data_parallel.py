"""vllm-ascend's drafter on data-parallel ranks: each rank serves its own batch (or none), in lockstep.

In a DP deployment every rank steps together: a rank with requests runs its step, one without runs a
dummy batch (``execute_dummy_batch``: the runner's ``_dummy_run``, which calls the drafter's
``dummy_run``), and the engines agree each step whether any rank still has work (vLLM's
``ParallelConfig.has_unfinished_dp``, an all-reduce over the DP group). Inside, the drafter syncs its
token count with the other ranks (the runner's own ``_sync_metadata_across_dp``, compiled from the
checkout; an all-reduce for a MoE draft such as DeepSeek's MTP layer) and, as its policy says, runs
its draft forwards padded to the largest rank's (vLLM's DP padding) or at its own size, eagerly or in
a captured graph as the ranks agreed.

Each rank is a process of a ``sim.ranks`` pool (gloo), with vLLM's parallel state for its DP place
(``world.data_parallel_world``), running the checkout's drafter through the runner's hand-off as the
single-rank gate does. The spec, per DP step:
- a rank with requests drafts what the reference drafts for its batch, and its per-step metadata are
  the reference's (the gate's checker under the implementation's rules, on that rank; its first pass
  may run padding rows, whose slots must be -1);
- every rank issues as many collectives over the DP group (each named by who issued it);
- every rank's draft forwards (a graph replay's included) hold one ``num_tokens_across_dp`` and one
  graph mode, and each rank runs its own entry of it: the rows it needs alone (a dummy batch: its
  graph's size) or the largest rank's (on an NPU, a rank that runs another size than its peers were
  told leaves a MoE all-to-all waiting or reading past its rows; ranks in different graph modes meet
  graph and eager work in one collective, vllm-ascend #5979, #13827).

The target's step is the runner's own ``_determine_batch_execution_and_padding`` (``handoff``), so a
rank syncs for its target and for its drafter as the runner does, and under full graphs every rank
captures at start-up (each capture a dummy run synced with the peers').
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sim.impls.vllm_ascend import accepted
from sim.impls.vllm_ascend.divergences import ONE_RANK_SAMPLES
from sim.ranks.pool import RankError, RankPool, RankResult
from sim.serving.scenario import Scenario

SERVE = "sim.impls.vllm_ascend.data_parallel:serve_dp"


@dataclass(frozen=True)
class DraftForward:
    """What one draft forward's context tells the model of data parallelism."""

    rows: int  # the rows the model was handed
    num_tokens: int  # the forward context's token count (the DP-padded size)
    across_dp: tuple[int, ...] | None  # its num_tokens_across_dp, None on one rank
    mode: str  # its graph mode (NONE: eager)

    @classmethod
    def of(cls, context, rows: int) -> DraftForward:
        dp = context.dp_metadata
        across = tuple(int(n) for n in dp.num_tokens_across_dp_cpu) if dp is not None else None
        mode = getattr(context.cudagraph_runtime_mode, "name", str(context.cudagraph_runtime_mode))
        return cls(rows, int(getattr(context, "num_tokens", rows) or 0), across, mode)

    def __str__(self) -> str:
        return f"{self.rows} rows, {self.num_tokens} tokens (across DP {list(self.across_dp or [])}, {self.mode})"


@dataclass
class DpCase:
    """What the ranks run: per rank, the scenario it serves (a dict of ``Scenario``), or None for a
    rank that has no requests (a dummy batch every step). ``setup``: e.g. a changed vllm-ascend applied in
    each rank for this case (the function returns what undoes it, or None)."""

    scenarios: list[dict | None]
    setup: tuple[str, ...] = ()  # ("module:function", *args): what each rank calls before serving it
    lmhead_tp: bool = False  # vllm-ascend's lm-head TP across the DP ranks (``lmhead_tp``)
    divergences: tuple[str, ...] | None = None  # the ids the ranks accept (``accepted``); None: every one

    @classmethod
    def of(
        cls,
        *scenarios: Scenario | None,
        setup: tuple[str, ...] = (),
        lmhead_tp: bool = False,
        divergences: tuple[str, ...] | None = None,
    ) -> DpCase:
        """The case of these ranks' scenarios (None: a rank without requests), each checked as it loads."""
        if len(scenarios) < 2 or all(s is None for s in scenarios):
            raise ValueError(
                f"dp_ranks: {len(scenarios)} ranks, {sum(s is not None for s in scenarios)} with"
                " requests: a DP case has at least two ranks, one of them with requests"
            )
        sampling = [r for r, s in enumerate(scenarios) if s is not None and s.runner_samples]
        if sampling:
            raise ValueError(f"dp_ranks: rank {sampling[0]} with runner_samples=True: {ONE_RANK_SAMPLES}")
        if lmhead_tp:
            models = {(s.seed, s.vocab_size, s.hidden_size, s.method) for s in scenarios if s is not None}
            if len(models) > 1:
                raise ValueError(
                    f"lmhead_tp=True with the ranks' (seed, vocab_size, hidden_size, method) {sorted(models)}: the"
                    " lm head split over the ranks is one model's, so every rank serves the same model"
                )
        return cls([dataclasses.asdict(s) if s is not None else None for s in scenarios], setup, lmhead_tp, divergences)

    def save(self, path: str | Path) -> Path:
        """The case as a replay file (``python -m sim replay PATH --impl vllm_ascend``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {"dp_ranks": self.scenarios, **({"lmhead_tp": True} if self.lmhead_tp else {})}
        saved |= accepted.saved(self.divergences)
        path.write_text(json.dumps(saved, indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: dict) -> DpCase:
        """The case a replay file's ``{"dp_ranks": [...]}`` describes; ``ValueError`` names the rank and field."""
        ranks = data.get("dp_ranks")
        if not isinstance(ranks, list):
            raise ValueError(f"dp_ranks={ranks!r}: expected a list of scenarios (null: a rank without requests)")
        scenarios = []
        for r, spec in enumerate(ranks):
            try:
                scenarios.append(None if spec is None else Scenario.from_dict(spec))
            except ValueError as exc:
                raise ValueError(f"dp_ranks[{r}]: {exc}") from None
        lmhead = data.get("lmhead_tp", False)
        if type(lmhead) is not bool:
            raise ValueError(f"lmhead_tp={lmhead!r}: expected true or false")
        return cls.of(*scenarios, lmhead_tp=lmhead, divergences=accepted.divergence_ids(data))


@dataclass
class DpRankResult(RankResult):
    steps: list[list[DraftForward]] = field(default_factory=list)  # per DP step, its draft forwards
    dummy: list[bool] = field(default_factory=list)  # per DP step: whether this rank ran a dummy batch
    problems: list[str] = field(default_factory=list)  # this rank's differences from the reference
    needed: list[int] = field(default_factory=list)  # per DP step: the rows its first pass needs alone
    # per DP step: the rows its draft steps 2..K run outside the DP view (its own batch), or None
    own_steps: list[int | None] = field(default_factory=list)
    alone: bool = False  # its drafter syncs nothing with its peers (Rules.drafts_outside_dp)
    sites: list[list[str]] = field(default_factory=list)  # per DP step: its DP collectives, by issuer
    events: dict = field(default_factory=dict)  # what its scheduler did (RunReport.scheduler_events)


def serve_dp(case: DpCase, rank: int, size: int, device) -> DpRankResult:
    """One DP rank's run of ``case`` (the pool's serve function): vLLM's DP state made at the rank's
    first case, the case's setup around this one."""
    from devices.plugins import import_object
    from sim.impls.kit.ascend import world
    from sim.impls.vllm_ascend import lmhead_tp

    undo = None
    try:
        world.data_parallel_world(rank, size)
        world.forget_model_facts()  # each case is a server of its own drafter
        if case.setup:
            undo = import_object(case.setup[0])(*case.setup[1:])
        with lmhead_tp.across_dp(size) if case.lmhead_tp else contextlib.nullcontext():
            return _Rank(case, rank, device).run()
    except RankError:
        raise
    except Exception as exc:
        raise RankError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}", 0, "crash") from exc
    finally:
        if undo is not None:
            undo()


class _Rank:
    """One DP rank's serving: its scenario through the gate's run (checked against the reference), each
    call one DP step; then, and throughout on a rank without requests, dummy batches while a peer has work."""

    def __init__(self, case: DpCase, rank: int, device):
        from sim.impls.kit.ascend.importing import import_ascend

        self.case, self.device = case, device
        self.impl = accepted.implementation_accepting(case.divergences)
        self.dp_group = import_ascend("vllm.distributed.parallel_state").get_dp_group().cpu_group
        self.result = DpRankResult(rank)
        self.forwards: list[DraftForward] = []  # this step's draft forwards
        self.sites: list[str] = []  # this step's collectives over the DP group, each named by its issuer
        self.proposer = None

    def run(self) -> DpRankResult:
        """The rank's result; ``RankError`` naming the DP step, the collectives met in it and where it stopped."""
        with _named_collectives(self.dp_group, self.sites) as count:
            try:
                self.serve()
            except Exception as exc:
                dummy = self.result.dummy
                doing = "a dummy batch" if dummy and dummy[-1] else "requests"
                where = f"at DP step {len(dummy) - 1} ({doing})" if dummy else "at start-up"
                frames = "".join(traceback.format_tb(exc.__traceback__)[-4:])
                raise RankError(
                    f"{where}, after the DP collectives {self.sites}: {type(exc).__name__}: {exc}\n{frames}",
                    count[0],
                    "crash",
                ) from exc
        self.result.collectives = count[0]
        return self.result

    def serve(self) -> None:
        from sim.serving.run import run_scenario, scheduler_of

        spec = self.case.scenarios[self.result.rank]
        if spec is None:  # a rank without requests: its peers' configuration, no request
            spec = {**next(s for s in self.case.scenarios if s is not None), "requests": []}
        self.scenario = dataclasses.replace(Scenario.from_dict(spec), dp=len(self.case.scenarios))
        self.rules = dataclasses.replace(
            self.impl.rules, method=self.scenario.method, graph_mode=self.scenario.graph_mode
        )
        self.result.alone = self.rules.drafts_outside_dp
        # the rank's engine's scheduler (another than the loop's own): a step it schedules nothing for is a
        # dummy batch beside the peers' step, and it goes on stepping after the rank's requests are done
        schedule = scheduler_of(self.scenario)
        if schedule is not None:
            schedule.idle = self.dummy_step
        report = run_scenario(
            self.scenario,
            self.device,
            self.impl,
            proposer_cls=self.make,
            on_iteration=self.on_iteration,
            scheduler=schedule,
        )
        self.result.drafts = report.drafts
        self.result.problems = [str(m) for m in report.mismatches[:4]]
        self.result.events = dict(report.scheduler_events)
        while self.step(False):  # no requests (left) here: a dummy batch for each step of the others'
            self.dummy_batch()
            if schedule is not None:
                schedule.between_steps()

    def dummy_step(self) -> None:
        """A step its scheduler scheduled nothing for, while the rank has requests: a dummy batch in the DP step."""
        self.step(True, dummy=True)
        self.dummy_batch()

    def dummy_batch(self) -> None:
        """The worker's ``execute_dummy_batch``: ``_dummy_run(decode_token_per_req)`` (main:
        ``uniform_decode_query_len``), one uniform decode of 1 + K tokens; its rows a graph's, if any."""
        from mtp.trace import Phase
        from sim.oracle.compare import expected_rows

        tokens = 1 + self.scenario.num_spec_tokens
        self.proposer.dummy_run(tokens)
        self.result.needed.append(expected_rows(tokens, self.proposer.captured_sizes()[Phase.FIRST]))
        self.result.own_steps.append(None)

    def step(self, has_work: bool, dummy: bool | None = None) -> bool:
        """The engines' per-step agreement: whether any rank still has work (vLLM's own all-reduce). ``dummy``:
        whether this rank runs a dummy batch in the step (by default, where it has no work)."""
        from sim.impls.kit.ascend.importing import import_ascend

        result = self.result
        if len(result.steps) < len(result.dummy):  # the step this rank was in is over
            result.steps.append(list(self.forwards))
            result.sites.append(list(self.sites))
        self.forwards.clear()
        self.sites.clear()
        more = import_ascend("vllm.config").ParallelConfig.has_unfinished_dp(self.dp_group, has_work)
        if more:
            result.dummy.append(not has_work if dummy is None else dummy)
        return more

    def make(self, *args, **kwargs):
        """The rank's proposer: the implementation's, each call of which is one DP step with requests."""
        rank = self

        class DpRank(self.impl.proposer_cls):
            def propose(self, batch, sampled):
                rank.step(True)
                return super().propose(batch, sampled)

        self.proposer = DpRank(*args, **kwargs)
        self.proposer.capture_all()  # as a worker captures at start-up, every rank at once (a DP sync each)
        self.proposer.model.on_forward = lambda context, rows: self.forwards.append(DraftForward.of(context, rows))
        return self.proposer

    def on_iteration(self, _report, sim, proposer) -> None:
        """The rows this step's first pass must run on this rank alone (the reference's), and those its
        draft steps run outside the DP view, where the implementation's rules say they do."""
        from sim.oracle.compare import first_pass_rows

        captured = proposer.captured_sizes()
        self.result.needed.append(first_pass_rows(sim.last.case, self.scenario.padded, captured, self.impl.rules)[0])
        outside = self.rules.steps_outside_the_dp_view
        self.result.own_steps.append(len(sim.last.case.requests) if outside else None)


@contextlib.contextmanager
def _named_collectives(group, sites: list[str]):
    """Every all-reduce over ``group`` named in ``sites`` by the functions that issued it (e.g.
    ``dummy_run > _sync_metadata_across_dp``), and counted (``[count]``)."""
    import torch.distributed as dist

    original, count = dist.all_reduce, [0]

    def all_reduce(tensor, *args, **kwargs):
        if kwargs.get("group") is group:
            caller = sys._getframe(1)
            sites.append(f"{caller.f_back.f_code.co_name} > {caller.f_code.co_name}")
            count[0] += 1
        return original(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce
    try:
        yield count
    finally:
        dist.all_reduce = original


class DpPool(RankPool):
    """``size`` DP ranks on the simulator, serving ``DpCase``s."""

    def __init__(self, size: int, divergences: tuple[str, ...] | None = None, **timeouts):
        super().__init__(size, SERVE, "sim", **timeouts)
        self.preload = ("sim.impls.vllm_ascend.rank_preload",)
        self.divergences = divergences  # what a case that names none accepts (``accepted``); None: every one


def check_dp(case: DpCase, pool: DpPool, events: Counter | None = None) -> list[str]:
    """Problems found running ``case`` on ``pool``'s ranks: each rank's differences from the reference,
    then the first DP step at which the ranks' draft forwards saw different DP views. ``events``: where
    the ranks' scheduler events are summed (``RunReport.scheduler_events``)."""
    if len(case.scenarios) != pool.size:
        raise ValueError(f"dp_ranks: {len(case.scenarios)} ranks' scenarios for a pool of {pool.size} DP ranks")
    results = pool.run(accepted.accepted_by(case, pool.divergences))
    if events is not None:
        for r in results:
            events.update(r.events)
    problems = [f"rank {r.rank}: {p}" for r in results for p in r.problems[:1]]
    counts = {r.rank: len(r.steps) for r in results}
    if len(set(counts.values())) > 1:
        problems.append(f"ranks ran different numbers of DP steps: {counts}")
    for i, per_rank in enumerate(zip(*(r.sites for r in results))):
        if len({len(sites) for sites in per_rank}) > 1:
            said = "; ".join(f"rank {r.rank}: {sites}" for r, sites in zip(results, per_rank))
            problems.append(f"DP step {i}: the ranks issued different DP collectives: {said}")
            break
    for i, per_rank in enumerate(zip(*(r.steps for r in results))):
        problem = _dp_view_problem(i, results, per_rank)
        if problem:
            problems.append(problem)
            break
    return problems


def _dp_view_problem(i: int, results: list[DpRankResult], per_rank: list[list[DraftForward]]) -> str | None:
    """What is wrong with DP step ``i``'s draft forwards, if anything. The spec: every rank's forwards
    hold one ``num_tokens_across_dp`` and one graph mode; rank r's forwards run its entry of it (the
    context's token count and the first forward's rows); and that entry is the rows rank r needs alone
    (no DP padding) or the largest rank's (vLLM's DP padding), never fewer than its own. Drafters that
    sync nothing with their peers are held to ``_alone_problem`` instead."""
    needed = [r.needed[i] for r in results]
    said = "; ".join(
        f"rank {r.rank}{' (dummy)' if r.dummy[i] else ''} needs {needed[k]}, ran "
        + (", ".join(map(str, forwards)) or "no draft forward")
        for k, (r, forwards) in enumerate(zip(results, per_rank))
    )
    if any(not forwards for forwards in per_rank):
        return f"DP step {i}: a rank ran no draft forward: {said}"
    if all(r.alone for r in results):
        return _alone_problem(i, results, per_rank, needed, said)
    views = {(f.across_dp, f.mode) for forwards in per_rank for f in forwards}
    if len(views) > 1 or next(iter(views))[0] is None:
        return f"DP step {i}: the ranks' forwards do not share one num_tokens_across_dp and graph mode: {said}"
    across = next(iter(views))[0]
    for k, forwards in enumerate(per_rank):
        ran = {f.num_tokens for f in forwards} | {forwards[0].rows}
        if ran != {across[k]} or across[k] not in (needed[k], max(needed)):
            return (
                f"DP step {i}: rank {results[k].rank} must run {needed[k]} (its own) or {max(needed)} (the"
                f" largest rank's) tokens, as num_tokens_across_dp {list(across)} says: {said}"
            )
    return None


def _alone_problem(i: int, results, per_rank, needed: list[int], said: str) -> str | None:
    """DP step ``i`` of drafters that sync nothing with their peers: every forward told its own rows as
    its token count and its first pass's count for every rank (``[n] * dp``, what vllm-ascend hands a
    draft it did not sync), and a rank with requests running what it needs alone (first pass: its rows;
    steps 2..K: its ``own_steps``, else the first pass's). A dummy batch's size is its runner's (the
    target's step, synced), nothing of the draft's."""
    for k, forwards in enumerate(per_rank):
        rank = results[k]
        own = rank.own_steps[i]
        want = [needed[k]] + [needed[k] if own is None else own] * (len(forwards) - 1)
        view = (forwards[0].rows,) * len(results)
        if any(f.num_tokens != f.rows or f.across_dp != view for f in forwards) or (
            not rank.dummy[i] and [f.rows for f in forwards] != want
        ):
            return (
                f"DP step {i}: rank {rank.rank} syncs nothing with its peers, so its forwards must be told"
                f" {list(view)}{'' if rank.dummy[i] else f' and run {want}'}: {said}"
            )
    return None


def scenarios_for(scenario: Scenario, size: int, idle: tuple[int, ...] = ()) -> list[dict | None]:
    """``size`` ranks' scenarios: ``scenario`` reseeded per rank (other batches on each), None for ``idle`` ones."""
    return [
        None if r in idle else dataclasses.asdict(dataclasses.replace(scenario, seed=scenario.seed + r))
        for r in range(size)
    ]
