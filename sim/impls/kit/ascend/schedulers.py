"""vLLM's scheduler as vllm-ascend's platform deploys it, and vllm-ascend's own schedulers
(``Scenario.scheduler``: ``vllm`` under vllm-ascend, ``balance``, ``recompute``, ``dynamic_batch``,
``short_request_first``, ``batch_job_aware``).

vllm-ascend's platform patches vLLM's scheduler and KV cache manager in every deployment
(``patch/platform``): the KV cache's free-block order, the KV cache coordinator, and on 0.23.0 the blocks of
in-flight tokens under asynchronous scheduling (which adds ``Request.num_in_flight_tokens``, read by its
recompute scheduler; v0.25.1rc backports the same as ``patch_swa_inflight_free``, which its recompute scheduler
imports). ``deploy`` applies the checkout's patches of them once per process, each module loaded from its file
alone and registered under its name, so that a scheduler importing one gets it without its package (which imports
every platform patch, tool parsers and ``torch.accelerator``'s replacement by ``torch.npu``'s included).

Balance scheduling (``enable_balance_scheduling``; production DeepSeek and GLM deployments set it beside MTP,
vllm-ascend #9675): the platform replaces vLLM's ``Scheduler`` by its ``BalanceScheduler``, which then schedules
by a copy of vLLM's ``Scheduler.schedule`` of its own, in which no rank admits a waiting request while any DP
rank ran its maximum of requests at the last step: each DP engine all-gathers its scheduler's running count
once per step (``balance_gather``, after the engines' all-reduce of whether any has work). Its module's
replacement of vLLM's globals is undone, so vLLM's own scheduler stays vLLM's (with balance scheduling off the
replacement schedules as vLLM's; on a PD prefill node, where it turns preemption off, it is not driven).
Asynchronously a deployment's scheduler is vLLM's ``AsyncScheduler`` over ``BalanceScheduler`` (vLLM imports
``async_scheduler`` when the engine asks for its scheduler class, after the patch): that module is executed
afresh over it.

The recompute scheduler of a PD decode node (``recompute_scheduler_enable``, a KV consumer): its
``RecomputeScheduler`` (``AsyncRecomputeScheduler`` asynchronously) gives a new MTP request placeholder drafts
for its first step, and, out of blocks, sends a running request back to a prefill node (its outputs so far,
stop reason ``recomputed``) where vLLM's would preempt it here. Each is a copy of vLLM's schedule kept apart
from vLLM's: a fix in vLLM's reaches it only when it is copied again, the reason to drive them.

The dynamic batch of releases up to 0.23.0 (``SLO_limits_for_dynamic_batch``; main removed it, #11933): the
platform replaces the scheduler class by its ``SchedulerDynamicBatch``, a decode-first copy of the schedule whose
token budget a refiner sets from a latency table the deployment downloads; without the table (none here: it is
measured on an NPU) the refiner keeps the configured budget and the copy schedules alone. A deployment under
asynchronous scheduling still builds this synchronous class (vLLM takes a configured class as it is): not driven.

Main's waiting-queue orders (``short_request_first_config``, #11576; ``batch_job_sched_config``, #12240; not in
0.23.0): vLLM's own schedule over a waiting queue of vllm-ascend's, which decides whom it admits next, and so
what lands in a freed row of the runner's batch. ShortRequestFirst: three lanes (preempted requests, prompts of
up to ``SHORT_PROMPT`` tokens, the rest), its queue installed by main's ``BalanceScheduler`` (the platform's
replacement of vLLM's ``Scheduler`` in every deployment, balance scheduling off) or, asynchronously, by its
``ShortRequestFirstAsyncScheduler``; its aging of long prompts by the wall clock is off (``long_max_wait_ms`` 0),
so that a run replays. BatchJobAware: its ``BatchJobAwareScheduler`` (``BatchJobAwareAsyncScheduler``), admitting
by prompt length within what its reserve for the running requests' next steps (their drafts' lookahead
included) leaves of the free blocks; every request here is of one job (no ``#job_name[...]#`` in its id).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from pathlib import Path

from sim.impls.kit.ascend import patches

# the platform's patches of vLLM's scheduler and KV cache manager, in the order its package imports them
SCHEDULER_PATCHES = (
    "patch_kv_cache_utils",
    "patch_async_swa_kv_lifetime",
    "patch_kv_cache_coordinator",
    "patch_swa_inflight_free",
)
SHORT_PROMPT = 8  # ShortRequestFirst's threshold: the tiny scenarios' prompts run from 1 token to the model's length
CONFIGS = {  # additional_config selecting each (0.23.0's keys, main also reads them, deprecated; then main's)
    "balance": {"enable_balance_scheduling": True},
    "recompute": {"recompute_scheduler_enable": True},
    "dynamic_batch": {"SLO_limits_for_dynamic_batch": 50},  # a latency limit in ms: any positive one enables it
    "short_request_first": {
        "scheduler_config": {
            "short_request_first_config": {"enabled": True, "threshold": SHORT_PROMPT, "long_max_wait_ms": 0}
        }
    },
    "batch_job_aware": {"scheduler_config": {"batch_job_sched_config": {"enabled": True}}},
}
# each scheduler's module in the checkout, where vllm-ascend's own (balance scheduling's: a platform patch)
MODULES = {
    "recompute": "vllm_ascend.core.recompute_scheduler",
    "dynamic_batch": "vllm_ascend.core.scheduler_dynamic_batch",
    "short_request_first": "vllm_ascend.core.short_request_first_scheduler",
    "batch_job_aware": "vllm_ascend.core.batch_job_aware_scheduler",
}
# each scheduler's class, synchronous and asynchronous (None: the platform's replacement of vLLM's Scheduler,
# main's BalanceScheduler, which installs the ShortRequestFirst queue itself)
CLASSES = {
    "recompute": ("RecomputeScheduler", "AsyncRecomputeScheduler"),
    "dynamic_batch": ("SchedulerDynamicBatch", "SchedulerDynamicBatch"),
    "short_request_first": (None, "ShortRequestFirstAsyncScheduler"),
    "batch_job_aware": ("BatchJobAwareScheduler", "BatchJobAwareAsyncScheduler"),
}
QUEUES = {  # the waiting queue each order policy puts in its scheduler
    "short_request_first": "ShortRequestFirstRequestQueue",
    "batch_job_aware": "BatchJobAwareRequestQueue",
}


# vLLM's rule before #43733, as its schedule and the copies of it keep it (wrapped in parentheses by vLLM's
# formatter, on one line by vllm-ascend's): a request's first scheduling from the waiting queue gets no lookahead slots
WITHOUT_LOOKAHEAD = re.compile(r"effective_lookahead_tokens = \(?\s*0 if request\.num_computed_tokens == 0")


def _import(module: str):
    from sim.impls.kit.ascend.importing import import_ascend

    return import_ascend(module)


def _platform(name: str) -> Path:
    return patches.file(patches.PLATFORM, name)


def path(name: str) -> Path:
    """The file of vllm-ascend's scheduler ``name`` (``balance``: its platform patch) in the checkout."""
    if name == "balance":
        return _platform("patch_balance_schedule")
    return Path(_import("vllm_ascend").__file__).parent.parent / (MODULES[name].replace(".", "/") + ".py")


def source(name: str) -> str | None:
    """The source of the checkout's scheduler ``name``; None where the checkout has none."""
    file = path(name)
    return file.read_text() if file.exists() else None


def first_scheduling_without_lookahead(name: str) -> bool:
    """Whether the checkout's copy of vLLM's schedule in scheduler ``name`` keeps ``WITHOUT_LOOKAHEAD``."""
    return WITHOUT_LOOKAHEAD.search(source(name) or "") is not None


def vllm_first_scheduling_without_lookahead() -> bool:
    """Whether the installed vLLM's own ``Scheduler.schedule`` keeps ``WITHOUT_LOOKAHEAD`` (vLLM before 0.23: the
    release branches up to v0.22.1rc run on one)."""
    schedule = _import("vllm.v1.core.sched.scheduler").Scheduler.schedule
    return WITHOUT_LOOKAHEAD.search(inspect.getsource(schedule)) is not None


def missing_classes(name: str) -> list[str]:
    """What the kit builds for scheduler ``name`` (``CLASSES``, both orders) that the checkout's files do not
    define: a class absent from its module, or (None) main's ``BalanceScheduler`` not installing its queue."""
    missing = []
    for cls in dict.fromkeys(CLASSES.get(name, ())):
        if cls is None and MODULES[name] not in (source("balance") or ""):
            missing.append(f"BalanceScheduler's {QUEUES[name]}")
        elif cls is not None and f"class {cls}(" not in (source(name) or ""):
            missing.append(cls)
    return missing


def reads_a_request_field_vllm_lacks(name: str, field: str) -> bool:
    """Whether the checkout's scheduler ``name`` reads ``Request.<field>``, which the installed vLLM's
    ``Request`` never sets."""
    request = inspect.getsource(_import("vllm.v1.request").Request)
    return f".{field}" in (source(name) or "") and f"self.{field}" not in request


def deployed(name: str) -> bool:
    """Whether the platform's package imports its patch ``name`` in this deployment (``patches.deployed``:
    v0.20.2rc's coordinator patch only with ``VLLM_ASCEND_APPLY_DSV4_PATCH``, 0.23.0's in-flight blocks only on
    vLLM 0.23.0, 0.13.0's coordinator patch only under its ``USE_MULTI_BLOCK_POOL``)."""
    return patches.deployed(_platform("__init__"), patches.module(patches.PLATFORM, name))


@functools.cache
def deploy() -> tuple[str, ...]:
    """The checkout's patches of vLLM's scheduler and KV cache manager applied, as in a deployment (``deployed``);
    their names."""
    applied = tuple(name for name in SCHEDULER_PATCHES if _platform(name).exists() and deployed(name))
    for name in applied:
        patches.execute(patches.module(patches.PLATFORM, name), _platform(name), registered=True)
    return applied


@functools.cache
def _balance_module():
    """The checkout's ``patch_balance_schedule``; ``ValueError`` where the checkout has none."""
    file = path("balance")
    if not file.exists():
        raise ValueError(f"scheduler='balance': this vllm-ascend has no balance scheduling ({file.name} is absent)")
    scheduler, core = _import("vllm.v1.core.sched.scheduler"), _import("vllm.v1.engine.core")
    return patches.execute(
        "vllm_ascend.patch.platform.patch_balance_schedule",
        file,
        {scheduler: ["Scheduler"], core: ["DPEngineCoreProc"], core.EngineCoreProc: ["run_engine_core"]},
    )


@functools.cache
def _async_over_balance():
    """vLLM's ``AsyncScheduler`` as a deployment with balance scheduling has it: over ``BalanceScheduler``."""
    scheduler = _import("vllm.v1.core.sched.scheduler")
    path = Path(inspect.getfile(_import("vllm.v1.core.sched.async_scheduler")))
    original = scheduler.Scheduler
    scheduler.Scheduler = _balance_module().BalanceScheduler
    try:
        return patches.execute("vllm_ascend_balance_async_scheduler", path).AsyncScheduler
    finally:
        scheduler.Scheduler = original


def scheduler_class(name: str, asynchronous: bool):
    """The class a deployment builds for vllm-ascend's scheduler ``name`` (``balance``, or one of ``MODULES``);
    ``ValueError`` where the checkout has none."""
    if name == "balance":
        return _async_over_balance() if asynchronous else _balance_module().BalanceScheduler
    file = path(name)
    if not file.exists():
        raise ValueError(f"scheduler={name!r}: this vllm-ascend has no such scheduler ({file.name} is absent)")
    module = _import(MODULES[name])
    cls = CLASSES[name][asynchronous]
    return _balance_module().BalanceScheduler if cls is None else getattr(module, cls)


def check_built(name: str, scheduler) -> None:
    """``RuntimeError`` where ``scheduler``, built for ``name``, does not wait its requests in that policy's queue
    (a checkout whose configuration no longer selects it would run vLLM's order unseen)."""
    if name in QUEUES and type(scheduler.waiting).__name__ != QUEUES[name]:
        raise RuntimeError(
            f"scheduler={name!r}: {type(scheduler).__name__} waits its requests in a"
            f" {type(scheduler.waiting).__name__}, not vllm-ascend's {QUEUES[name]}: this checkout's configuration"
            " does not select it"
        )


@contextlib.contextmanager
def enabled(name: str, vllm_config):
    """Inside, vllm-ascend's config selects its scheduler ``name`` (``vllm_config``'s ``additional_config``
    and the config singleton its schedulers read); the singleton is put back after."""
    configs = _import("vllm_ascend.ascend_config")
    before = configs._ASCEND_CONFIG
    vllm_config.additional_config = {**(vllm_config.additional_config or {}), **CONFIGS[name]}
    if name == "dynamic_batch":  # what the platform sets beside the class (chunked prefill it relies on)
        vllm_config.scheduler_config.SLO_limits_for_dynamic_batch = CONFIGS[name]["SLO_limits_for_dynamic_batch"]
        vllm_config.scheduler_config.enable_chunked_prefill = True
    try:
        configs._ASCEND_CONFIG = None
        configs.init_ascend_config(vllm_config)
        yield
    finally:
        configs._ASCEND_CONFIG = before


def gather(scheduler, group) -> None:
    """The engine's per-step all-gather of the DP ranks' running counts into ``scheduler``'s balance queue,
    as the checkout's engine core calls it: ``balance_gather(dp_group)`` (0.23.0), or the group set on the
    scheduler first (main)."""
    if inspect.signature(scheduler.balance_gather).parameters:
        scheduler.balance_gather(group)
    else:
        scheduler.dp_group = group
        scheduler.balance_gather()


def holds_admissions(scheduler) -> bool:
    """Whether ``scheduler``'s next schedule admits none of its waiting requests for balance alone: it has
    some and room for them, and a rank ran its maximum of requests at the last gather (the copy's
    ``balance_flag``)."""
    cap = scheduler.max_num_running_reqs
    return (
        bool(scheduler.waiting)
        and len(scheduler.running) < cap
        and max(int(t.item()) for t in scheduler.balance_queue) == cap
    )
