"""vllm-ascend's balance scheduling as its platform deploys it (``Scenario.scheduler = "balance"``).

vllm-ascend's platform patch ``patch_balance_schedule`` replaces vLLM's ``Scheduler`` by its
``BalanceScheduler``. With ``enable_balance_scheduling`` on (``additional_config``; production DeepSeek
and GLM deployments set it beside MTP, vllm-ascend #9675) that scheduler schedules by a copy of vLLM's
``Scheduler.schedule`` of its own, in which no rank admits a waiting request while any DP rank ran its
maximum of requests at the last step: each DP engine all-gathers its scheduler's running count once per
step (``balance_gather``, after the engines' all-reduce of whether any has work). The copy is the
checkout's code, kept apart from vLLM's, so a fix in vLLM's scheduler reaches it only when it is copied
again: the reason to drive it.

The module is loaded from the checkout's file alone (its package imports every platform patch, tool
parsers included), and vLLM's module globals it replaces are put back, so vLLM's own scheduler stays
vLLM's for the rest of the process. Under asynchronous scheduling a deployment's ``AsyncScheduler`` is
vLLM's class over ``BalanceScheduler``: vLLM imports ``async_scheduler`` when the engine asks for its
scheduler class, after the patch replaced ``Scheduler``; here that module is executed afresh over it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
from pathlib import Path

PATCH = "vllm_ascend/patch/platform/patch_balance_schedule.py"
ENABLE = {"enable_balance_scheduling": True}  # additional_config (0.23.0; main also reads it, deprecated)


def _import(module: str):
    from sim.impls.kit.ascend.importing import import_ascend

    return import_ascend(module)


def _execute(name: str, path: Path, replaced: dict):
    """The module at ``path`` executed under ``name``, with ``replaced`` (object -> attribute names) as
    they were before it ran: what it assigns there at import is undone."""
    saved = {(owner, attr): owner.__dict__[attr] for owner, attrs in replaced.items() for attr in attrs}
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        for (owner, attr), value in saved.items():
            setattr(owner, attr, value)
    return module


@functools.cache
def _patch_module():
    """The checkout's ``patch_balance_schedule``; ``ValueError`` where the checkout has none."""
    path = Path(_import("vllm_ascend").__file__).parent.parent / PATCH
    if not path.exists():
        raise ValueError(f"scheduler='balance': this vllm-ascend has no balance scheduling ({PATCH} is absent)")
    scheduler, core = _import("vllm.v1.core.sched.scheduler"), _import("vllm.v1.engine.core")
    return _execute(
        "vllm_ascend.patch.platform.patch_balance_schedule",
        path,
        {scheduler: ["Scheduler"], core: ["DPEngineCoreProc"], core.EngineCoreProc: ["run_engine_core"]},
    )


@functools.cache
def _async_over_balance():
    """vLLM's ``AsyncScheduler`` as a deployment with balance scheduling has it: over ``BalanceScheduler``."""
    scheduler = _import("vllm.v1.core.sched.scheduler")
    path = Path(inspect.getfile(_import("vllm.v1.core.sched.async_scheduler")))
    original = scheduler.Scheduler
    scheduler.Scheduler = _patch_module().BalanceScheduler
    try:
        return _execute("vllm_ascend_balance_async_scheduler", path, {}).AsyncScheduler
    finally:
        scheduler.Scheduler = original


def scheduler_class(asynchronous: bool):
    """The scheduler class a deployment with balance scheduling builds: ``BalanceScheduler``, or vLLM's
    ``AsyncScheduler`` over it."""
    return _async_over_balance() if asynchronous else _patch_module().BalanceScheduler


@contextlib.contextmanager
def enabled(vllm_config):
    """Inside, vllm-ascend's config says balance scheduling is on (``vllm_config``'s ``additional_config``
    and the config singleton the scheduler reads); the singleton is put back after."""
    configs = _import("vllm_ascend.ascend_config")
    before = configs._ASCEND_CONFIG
    vllm_config.additional_config = {**(vllm_config.additional_config or {}), **ENABLE}
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
