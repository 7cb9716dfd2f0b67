"""vLLM's own scheduler as a serving run's schedule (``Scenario.scheduler = "vllm"``).

The serving loop (``sim.serving.simulator``) schedules by its own rules unless told otherwise. Here
vLLM's V1 ``Scheduler`` of the env's vLLM decides instead, on a KV cache of the scenario's blocks: which
requests run and in what order, how many tokens each (chunked prefills under the token budget), which
drafts are verified (the ones it schedules: fewer near ``max_model_len``), the KV blocks of each
request (its KV cache manager's), preemption when the blocks run out (the request's KV dropped, its
tokens computed again from the first as a prefill) and when a request is done. The loop still runs the
tiny target, verifies and proposes; it hands vLLM's scheduler each step's sampled tokens
(``ModelRunnerOutput``) and the new drafts (``DraftTokenIds``), as vLLM's engine core does with a
synchronous runner.

Under asynchronous scheduling (``Scenario.async_scheduling``) vLLM's ``AsyncScheduler`` decides, driven
in the order of the engine core's batch queue of two: each step is scheduled before the previous one's
output is known, so vLLM counts that step's drafts as accepted (its computed tokens ahead of the loop's
by the drafts the step rejects: checked), schedules placeholders for the drafts the runner keeps on the
device (the loop hands it none), and may schedule a request once more after the step that finishes it
(the loop runs that step too, as the runner does; its output is vLLM's to drop). A request preempted
while its step was in flight is told so as in the synchronous order. Placeholders scheduled for a request
the step before did not run (vLLM's placeholders outliving their step, which the runner would hand the
model as tokens) stop the run with ``SchedulerDefect``, naming them.

With ``Scenario.prefix_caching``, vLLM's prefix caching (blocks hashed as its engine core hashes them): a
request starting past the blocks it found cached computes from there, into the blocks it shares. The
configuration is the kit's tiny ``VllmConfig`` (``tiny_config``) with the scenario's sizes; only the scheduler
reads it. Under vllm-ascend the platform's patches of vLLM's scheduler apply to every run, and vllm-ascend's own
schedulers (``ASCENDS``) are driven as vLLM's is (``sim.impls.kit.ascend.schedulers``).

Every step's blocks must hold every position its drafts write the draft layer's KV at; a scheduler that
hands fewer (a first scheduling given no lookahead slots, vLLM's rule before #43733) stops the run naming it.
vLLM 0.27 on pads a request's last prompt token, scheduled beside running decodes, into a uniform decode
with placeholder drafts: the loop serves it as a prefill that verified them all rejected, their rows the
token the runner clamps them to.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import inspect
from collections import Counter

import torch

from sim.impls.kit import tiny_config
from sim.serving.scenario import Scenario
from sim.serving.simulator import RequestState, SchedulerDefect

LAYER = "draft"  # the one KV-cache group's layer name (the scheduler reads none of its tensors)
# vLLM's placeholder draft (``-1``), and the token id the runner clamps it to before the model reads it
PLACEHOLDER, CLAMPED = -1, 0
# a decode node's KV connector (its scheduler side), as vLLM's factory finds it by module and name
REMOTE_PREFILL, REMOTE_PREFILL_MODULE = "RemotePrefill", "sim.impls.kit.remote_prefill"


@functools.cache
def _under_vllm_ascend() -> bool:
    """Whether vllm-ascend is installed: its platform plugin then activates with vLLM's config."""
    return importlib.util.find_spec("vllm_ascend") is not None


def _import(module: str):
    """``module`` of vLLM as this env runs it: under the fake torch_npu where vllm-ascend is installed,
    else on vLLM's CPU platform."""
    if _under_vllm_ascend():
        from sim.impls.kit.ascend.importing import import_ascend

        return import_ascend(module)
    from sim.impls.kit.vllm_types import import_vllm

    return import_vllm(module)


@functools.cache
def _base_config():
    """The kit's tiny ``VllmConfig``, built once per process. Under vllm-ascend its platform sets its own
    config singleton from it, which a proposer built earlier reads: that singleton is put back."""
    if not _under_vllm_ascend():
        return tiny_config.vllm_config(_import("vllm.config"), 32, 1, "cpu")
    from sim.impls.kit.ascend import world

    configs = _import("vllm_ascend.ascend_config")
    before = configs._ASCEND_CONFIG
    try:
        return world.tiny_vllm_config(32, 1)
    finally:
        configs._ASCEND_CONFIG = before


@functools.cache
def pads_last_prompt_tokens() -> bool:
    """Whether the env's vLLM schedules a request's last prompt token beside running decodes as a uniform
    decode, with placeholder drafts (vLLM 0.27 on: ``Scheduler.schedule``'s ``pad_spec_decode``)."""
    return "pad_spec_decode" in inspect.getsource(_import("vllm.v1.core.sched.scheduler").Scheduler.schedule)


def _block_hasher(config):
    """The function hashing a request's full blocks for prefix caching, as vLLM's engine core makes it (from
    vLLM 0.33 each hash also covers the tokens after its block an EAGLE/MTP drafter's KV reads, in place of
    dropping the last matched block)."""
    utils = _import("vllm.v1.core.kv_cache_utils")
    hash_fn = _import("vllm.utils.hashing").get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    utils.init_none_hash(hash_fn)
    lookahead = () if not hasattr(config, "num_hash_lookahead_tokens") else (config.num_hash_lookahead_tokens,)
    return utils.get_request_block_hasher(config.cache_config.block_size, hash_fn, *lookahead)


def vllm_config(scenario: Scenario):
    """The tiny ``VllmConfig`` with the scenario's sizes, as the scheduler reads them."""
    base = _base_config()
    config = copy.copy(base)
    for name in ("scheduler_config", "cache_config", "model_config", "speculative_config"):
        setattr(config, name, copy.copy(getattr(base, name)))
    config.scheduler_config.max_num_seqs = scenario.max_num_reqs
    config.scheduler_config.max_num_batched_tokens = scenario.token_budget
    if hasattr(config.scheduler_config, "max_num_scheduled_tokens"):  # vLLM 0.23 on: the budget it schedules by
        config.scheduler_config.max_num_scheduled_tokens = scenario.token_budget
    config.scheduler_config.max_model_len = scenario.max_model_len
    config.scheduler_config.async_scheduling = scenario.async_scheduling
    config.model_config.max_model_len = scenario.max_model_len
    config.cache_config.block_size = scenario.block_size
    config.cache_config.num_gpu_blocks = scenario.num_blocks
    config.cache_config.enable_prefix_caching = scenario.prefix_caching
    config.speculative_config.num_speculative_tokens = scenario.num_spec_tokens
    if scenario.decode_node:  # every prompt's KV from a prefill node, through the connector's scheduler side
        transfer = _import("vllm.config").KVTransferConfig
        config.kv_transfer_config = transfer(
            kv_connector=REMOTE_PREFILL, kv_role="kv_consumer", kv_connector_module_path=REMOTE_PREFILL_MODULE
        )
        config.scheduler_config.disable_hybrid_kv_cache_manager = True  # one KV-cache group
    if scenario.scheduler == "balance":  # its balance queue holds one running count per DP rank
        config.parallel_config = copy.copy(base.parallel_config)
        config.parallel_config.data_parallel_size = scenario.dp
    return config


# vllm-ascend's own schedulers (Scenario.scheduler)
ASCENDS = ("balance", "recompute", "dynamic_batch", "short_request_first", "batch_job_aware")


def _ascend(name: str):
    """vLLM's scheduler as vllm-ascend deploys it, and its own (``sim.impls.kit.ascend.schedulers``), where
    vllm-ascend is installed; None elsewhere, and ``ValueError`` for one of vllm-ascend's own schedulers."""
    if not _under_vllm_ascend():
        if name in ASCENDS:
            raise ValueError(
                f"scheduler={name!r}: vllm-ascend's own scheduler needs vllm-ascend installed (tox -e vllm_ascend)"
            )
        return None
    from sim.impls.kit.ascend import schedulers

    schedulers.deploy()
    return schedulers


class VllmSchedule:
    """vLLM's ``Scheduler``, or ``AsyncScheduler`` under asynchronous scheduling (vllm-ascend's own where the
    scenario names one: its ``BalanceScheduler``, or vLLM's ``AsyncScheduler`` over it; a decode node's
    ``RecomputeScheduler``; the dynamic batch's ``SchedulerDynamicBatch``; main's waiting-queue orders), deciding
    a serving run's schedule (``sim.serving.simulator.Scheduler``).
    ``events`` counts what it did that the loop's own schedule never does: ``preempted`` (a request's KV
    dropped, computed again from its first token), ``counted ahead`` (a request scheduled with its in-flight
    step's rejected drafts counted as accepted), ``ran after finishing`` (a step scheduled before the one that
    finished its request), ``prefix cache hits``, ``last prompt tokens padded with placeholders``, ``admissions
    held for balance`` (a step after which a rank with room and waiting requests admits none, a peer having
    run its maximum), ``prompts received`` (a decode node's loads), ``sent back to a prefill node`` and
    ``admitted ahead of an earlier request`` (from the waiting queue, while one added before it waits there)."""

    def __init__(self, scenario: Scenario):
        config = vllm_config(scenario)
        kv = _import("vllm.v1.kv_cache_interface")
        spec = kv.FullAttentionSpec(block_size=scenario.block_size, num_kv_heads=1, head_size=8, dtype=torch.float32)
        cache = kv.KVCacheConfig(
            num_blocks=scenario.num_blocks, kv_cache_tensors=[], kv_cache_groups=[kv.KVCacheGroupSpec([LAYER], spec)]
        )
        outputs = _import("vllm.v1.structured_output")
        self.asynchronous = scenario.async_scheduling
        self.name = scenario.scheduler
        self.ascend = _ascend(self.name)
        own = self.name in ASCENDS
        with self.ascend.enabled(self.name, config) if own else contextlib.nullcontext():
            self.scheduler = self._class()(
                config, cache, outputs.StructuredOutputManager(config), block_size=scenario.block_size
            )
        if own:
            self.ascend.check_built(self.name, self.scheduler)
        # balance scheduling on DP ranks: the engines' per-step all-gather of their running counts
        self.dp_group = (
            _import("vllm.distributed.parallel_state").get_dp_group().cpu_group
            if self.name == "balance" and scenario.dp > 1
            else None
        )
        self.spec_tokens = scenario.num_spec_tokens
        self.extra_rows = int(scenario.method == "draft_model")  # a draft model's first pass: the next token's row
        self.max_model_len = scenario.max_model_len
        # what the engine runs for a step with nothing scheduled: nothing on one rank; on a DP rank a dummy
        # batch beside its peers' step (the DP rank sets it)
        self.idle = lambda: None
        # a decode node: ``receive(request, blocks)`` writes a request's prompt KV into the blocks vLLM loads it
        # into (the serving loop sets it); loads done since the last output, and those not yet scheduled
        self.receive = None
        self._loaded_now: set[str] = set()
        self._loaded_unscheduled: set[str] = set()
        self._sent_back: set[int] = set()  # the requests a decode node's recompute scheduler sent back
        self._request = _import("vllm.v1.request").Request
        self._hasher = _block_hasher(config) if scenario.prefix_caching else None
        self.block_size = scenario.block_size
        # prefix caching: each block's token after its last position, as its writer's draft layer took it for
        # that position's KV; and each request's blocks read from the cache (not its writes)
        self.after: dict[int, int] = {}
        self.hit_blocks: dict[str, int] = {}
        self._params = _import("vllm.sampling_params").SamplingParams
        self._outputs = _import("vllm.v1.outputs")
        self.last = None  # the last step's SchedulerOutput
        self.ahead = None  # asynchronous: the next step, scheduled before the last one's output (and its blocks)
        self.rejected: dict[str, int] = {}  # asynchronous: the drafts each request's step in flight rejects
        self.events: Counter = Counter()
        self.added: list[str] = []  # the requests, in the order they were added

    def sent_back(self) -> set[int]:
        """The requests a decode node's recompute scheduler sent back to a prefill node since last asked."""
        sent, self._sent_back = self._sent_back, set()
        return sent

    def _class(self):
        """vLLM's ``Scheduler`` or ``AsyncScheduler``; vllm-ascend's own, the checkout's."""
        if self.name in ASCENDS:
            return self.ascend.scheduler_class(self.name, self.asynchronous)
        if self.asynchronous:
            return _import("vllm.v1.core.sched.async_scheduler").AsyncScheduler
        return _import("vllm.v1.core.sched.scheduler").Scheduler

    @property
    def label(self) -> str:
        """The scheduler, as a message names it."""
        if self.name == "balance":
            over = "vLLM's AsyncScheduler over " if self.asynchronous else ""
            return f"{over}vllm-ascend's BalanceScheduler (balance scheduling)"
        whose = "vllm-ascend's" if self.name in ASCENDS else "vLLM's"
        return f"{whose} {type(self.scheduler).__name__}"

    def add(self, req: RequestState) -> None:
        params = self._params(max_tokens=req.max_new_tokens, ignore_eos=True)
        # vLLM 0.13's Request takes the end-of-sequence token (none here); later ones read it from the params
        eos = {"eos_token_id": None} if "eos_token_id" in inspect.signature(self._request).parameters else {}
        prompt = list(req.tokens[: req.prompt_len])
        hashes = {"block_hasher": self._hasher} if self._hasher is not None else {}
        self.scheduler.add_request(self._request(f"r{req.rid}", prompt, params, None, **eos, **hashes))
        self.added.append(f"r{req.rid}")

    def _scheduled(self):
        """vLLM's next step, and each scheduled request's blocks as its KV cache manager holds them now (a
        request finished before the step runs has none by then)."""
        out = self.scheduler.schedule()
        self._count_admissions_ahead(out)
        blocks = self.scheduler.kv_cache_manager.get_block_ids
        return out, {name: list(blocks(name)[0]) for name in out.num_scheduled_tokens}

    def _count_admissions_ahead(self, out) -> None:
        """Counts the requests ``out`` schedules from the waiting queue while one added before them still waits
        there (a waiting-queue order of vllm-ascend's; vLLM's own admits first come, first served)."""
        waiting = [r.request_id for r in (*self.scheduler.waiting, *getattr(self.scheduler, "skipped_waiting", ()))]
        if not waiting:
            return
        first_waiting = min(map(self.added.index, waiting))
        admitted = [r.req_id for r in out.scheduled_new_reqs]
        admitted += getattr(out.scheduled_cached_reqs, "resumed_req_ids", ())
        ahead = sum(self.added.index(n) > first_waiting for n in admitted)
        self.events["admitted ahead of an earlier request"] += ahead

    def schedule(self, running: dict[int, RequestState]) -> list[tuple[RequestState, list[int]]]:
        """The step vLLM schedules: per request, its rows (a prefill's chunk, or the token it continues
        from and the drafts vLLM verifies), its blocks and its computed tokens as vLLM holds them.
        ``running`` holds every request the loop may be asked to run, those finished after this step was
        scheduled included."""
        if self.ahead is None:  # scheduled now, after every output it was told: nothing counted ahead
            self.ahead, self.rejected = self._scheduled(), {}
        (out, blocks), self.ahead = self.ahead, None
        self._receive(running)
        sent = {int(r.request_id[1:]) for r in getattr(out, "recomputed_reqs", None) or ()}
        self._sent_back |= sent
        self.events["sent back to a prefill node"] += len(sent)
        ran = set(self.last.num_scheduled_tokens) if self.last is not None else set()  # the step before
        self.last = out
        if not out.num_scheduled_tokens:  # nothing to run: the step's empty output goes back at once
            self.scheduler.update_from_output(out, self._output([], []))
            self.idle()
            self.between_steps()
            return []
        if self._hasher is not None:
            self._written(running)
        computed = {r.req_id: r.num_computed_tokens for r in out.scheduled_new_reqs}
        cached = out.scheduled_cached_reqs
        first = set(computed) | set(getattr(cached, "resumed_req_ids", ()))  # scheduled from the waiting queue
        computed |= dict(zip(cached.req_ids, cached.num_computed_tokens))
        picked = []
        for name, n in out.num_scheduled_tokens.items():
            req = running[int(name[1:])]
            if name in self._loaded_unscheduled:  # its prompt's KV loaded: it starts past it (its last token again)
                self._loaded_unscheduled.discard(name)
                req.num_computed = computed[name]
            ahead = self.rejected.get(name, 0)  # vLLM took the step in flight's drafts as accepted
            if computed[name] - ahead < req.num_computed:
                req.preempted()
                self.hit_blocks.pop(name, None)
                self.events["preempted"] += 1
            if req.num_computed == 0 and computed[name] > 0 and self._hasher and computed[name] % self.block_size == 0:
                self._hit(name, req, computed[name], blocks[name])  # full blocks another request computed
                self.events["prefix cache hits"] += 1
            elif computed[name] - ahead != req.num_computed:
                raise RuntimeError(
                    f"{name}: {self.label} computed {computed[name]} tokens ({ahead} counted ahead), the loop"
                    f" {req.num_computed}"
                )
            else:
                self.events["counted ahead"] += ahead > 0
            self.events["ran after finishing"] += name not in self.scheduler.requests
            verified = len(out.scheduled_spec_decode_tokens.get(name, []))
            if req.prefilling:  # vLLM 0.27 on pads a prefill of its last token into a uniform decode
                req.drafts = [PLACEHOLDER] * verified  # placeholder drafts, which the rejection sampler rejects
                rows = req.tokens[req.num_computed : req.num_computed + n - verified] + [CLAMPED] * verified
                self.events["last prompt tokens padded with placeholders"] += verified > 0
            elif self.asynchronous:  # placeholders: the runner verifies the first of the drafts it kept
                if verified and name not in ran:
                    raise SchedulerDefect(
                        f"{name}: {self.label} scheduled {verified} placeholder drafts for a request the"
                        " step before did not run: the runner keeps drafts for the next step only, so the"
                        " model would be handed the placeholders (-1) as tokens: on an NPU a GatherV2"
                        " out-of-range fault (placeholders outliving their step: vLLM #46899, vllm-ascend #10305)"
                    )
                if verified > len(req.drafts):
                    raise RuntimeError(f"{name}: vLLM scheduled {verified} drafts, the loop has {len(req.drafts)}")
                req.drafts = req.drafts[:verified]
                rows = [req.tokens[-1], *req.drafts]
            else:
                req.drafts = list(out.scheduled_spec_decode_tokens.get(name, []))
                rows = [req.tokens[-1], *req.drafts]
            if len(rows) != n:
                raise RuntimeError(f"{name}: vLLM scheduled {n} tokens, the loop has {len(rows)} rows for it")
            req.blocks = blocks[name]
            self._cover(name, req, len(rows), name in first)
            picked.append((req, rows))
        return picked

    def _cover(self, name: str, req: RequestState, rows: int, first: bool) -> None:
        """The blocks handed for ``req``'s step hold every position its drafts write the draft layer's KV at
        (the last: its sequence length after the step plus K - 2, a draft model's one more; none past
        ``max_model_len``), else a ``SchedulerDefect``: the runner's block-table row has no block of the
        request's there (a stale entry, another request's block, or the null block), so its drafts' KV lands
        in another request's block."""
        last = min(req.num_computed + rows + self.spec_tokens - 2 + self.extra_rows, self.max_model_len - 1)
        need = last // self.block_size + 1
        if len(req.blocks) < need:
            cause = (
                "; its first scheduling from the waiting queue got no lookahead slots (effective_lookahead_tokens = 0"
                " while num_computed_tokens == 0: vLLM's Scheduler.schedule before vLLM #43733)"
                if first
                else ""
            )
            raise SchedulerDefect(
                f"{name}: {self.label} handed it {len(req.blocks)} blocks for a step whose drafts write the draft"
                f" layer's KV up to position {last}, in block {need - 1}{cause}. Past its blocks the runner's"
                " block-table row holds another request's block or the null block, where that KV lands"
            )

    def _written(self, running: dict[int, RequestState]) -> None:
        """Each block a running request wrote the draft layer's KV of its last position into: the token after
        that position it was written with (every position before the request's computed ones was)."""
        size = self.block_size
        for req in running.values():
            for j in range(self.hit_blocks.get(f"r{req.rid}", 0), len(req.blocks)):
                if (j + 1) * size > min(req.num_computed, len(req.tokens) - 1):
                    break
                self.after[req.blocks[j]] = req.tokens[(j + 1) * size]

    def _hit(self, name: str, req: RequestState, hit: int, blocks: list[int]) -> None:
        """``req`` starts past the ``hit`` tokens it found cached, reading the draft layer's KV other requests
        wrote into those blocks; each block's last position must have been written from the token that
        follows it in ``req``, else the drafter reads KV of another continuation."""
        size = self.block_size
        for j in range(hit // size):
            got, want = self.after.get(blocks[j]), req.tokens[(j + 1) * size]
            if got != want:
                raise SchedulerDefect(
                    f"{name}: vLLM's prefix cache hands it block {blocks[j]} (positions {j * size}-{(j + 1) * size - 1}),"
                    f" whose draft-layer KV at position {(j + 1) * size - 1} was written from the next token {got},"
                    f" where {name}'s is {want}: a chain of cached blocks that other requests wrote, whose first"
                    " continued otherwise (the drop of the last matched block for an EAGLE/MTP drafter covers only"
                    " the blocks of one writer)"
                )
        req.num_computed, self.hit_blocks[name] = hit, hit // size

    def commit(self, rids: list[int], sampled: list[list[int]], drafts: list[list[int]]) -> set[int]:
        """vLLM's scheduler told the step's sampled tokens, then (synchronously) the new drafts; the
        requests it finished. Asynchronously the next step is scheduled first, as the engine core does."""
        names = [f"r{rid}" for rid in rids]
        if self.asynchronous and self.scheduler.has_requests():
            self.ahead = self._scheduled()
        output = self._output(names, sampled)
        if self.asynchronous:  # the drafts stay on the runner's device; vLLM counted them all as accepted
            verified = self.last.scheduled_spec_decode_tokens
            self.rejected = {n: len(verified[n]) + 1 - len(s) for n, s in zip(names, sampled) if verified.get(n)}
        self.scheduler.update_from_output(self.last, output)
        if not self.asynchronous:
            live = [(n, d) for n, d in zip(names, drafts) if n in self.scheduler.requests]
            if live:
                self.scheduler.update_draft_token_ids(self._outputs.DraftTokenIds(*map(list, zip(*live))))
        self.between_steps()
        return {rid for rid, n in zip(rids, names) if n not in self.scheduler.requests}

    def _output(self, names: list[str], sampled: list[list[int]]):
        """The runner's output of a step: its requests' sampled tokens, and the prompts loaded since the last."""
        # vLLM 0.13's output has no defaults for what a step without logprobs or pooling leaves empty
        empty = {"logprobs": None, "prompt_logprobs_dict": {}, "pooler_output": []}
        takes = inspect.signature(self._outputs.ModelRunnerOutput).parameters
        loaded = {}
        if self._loaded_now:
            loaded = {"kv_connector_output": self._outputs.KVConnectorOutput(finished_recving=set(self._loaded_now))}
            self._loaded_now.clear()
        return self._outputs.ModelRunnerOutput(
            req_ids=names,
            req_id_to_index={n: i for i, n in enumerate(names)},
            sampled_token_ids=[list(s) for s in sampled],  # a copy, as the engine core receives: vLLM trims it
            **{k: v for k, v in empty.items() if k in takes and takes[k].default is inspect.Parameter.empty},
            **loaded,
        )

    def _receive(self, running: dict[int, RequestState]) -> None:
        """The prompts vLLM's connector asked to load (``remote_prefill``): written into their blocks by the
        serving loop (``receive``), reported loaded in the next output."""
        connector = self.scheduler.connector
        if connector is None:
            return
        for name, blocks in connector.pending.items():
            self.receive(running[int(name[1:])], blocks)
            self._loaded_now.add(name)
            self._loaded_unscheduled.add(name)
            self.events["prompts received"] += 1
        connector.pending.clear()

    def between_steps(self) -> None:
        """What the engine does between two steps besides: with balance scheduling on DP ranks, the DP ranks'
        running counts all-gathered (once per DP step on every rank, an idle one's dummy step included: the
        DP rank calls this after each of those)."""
        if self.dp_group is not None:
            self.ascend.gather(self.scheduler, self.dp_group)
            self.events["admissions held for balance"] += self.ascend.holds_admissions(self.scheduler)
