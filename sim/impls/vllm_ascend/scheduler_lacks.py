"""Which of vllm-ascend's own schedulers the harness cannot run whole on the checkout installed, read off the
schedulers' own files (``sim.impls.kit.ascend.schedulers``), not off the generation's name: the release branches
between 0.23.0 and main (v0.24.0rc to v0.26.0rc) draft as 0.23.0 does (``generation.name``) while their
schedulers are main's, or partly so (v0.24.0rc's recompute copy keeps the rule its balance copy dropped).

Each scheduler is one of: absent (its file is not in the checkout); in an earlier form than the one driven (a
class the kit builds not in its file: v0.24.0rc's ShortRequestFirst, the recompute scheduler's waiting queue only);
a copy of vLLM's schedule keeping the first-scheduling rule from before vLLM #43733 (``schedulers.WITHOUT_LOOKAHEAD``),
which stops a run at the first request admitted (balance scheduling, the dynamic batch; the recompute scheduler
reaches the rule only for a one-token prompt on a decode node, which its pin runs); a copy reading a request field
the installed vLLM never sets (the recompute scheduler copied from vLLM 0.25.1 under vLLM 0.27.1: a crash at its
first output); or whole. So is vLLM's own schedule (``Feature.VLLM_SCHEDULER``), which keeps the rule before
vLLM 0.23 (the release branches up to v0.22.1rc run on one). The pins in
``tests/impls/vllm_ascend/test_ascend_schedulers.py`` (vLLM's: ``test_vllms_scheduler.py``) run each as it is read
here, and fail where the run does not do what the file says.
"""

from __future__ import annotations

import functools

from sim.impls import Skip
from sim.impls.features import Feature
from sim.impls.kit.ascend import schedulers

FEATURES = {
    "balance": Feature.BALANCE_SCHEDULING,
    "recompute": Feature.RECOMPUTE_SCHEDULER,
    "dynamic_batch": Feature.DYNAMIC_BATCH,
    "short_request_first": Feature.SHORT_REQUEST_FIRST,
    "batch_job_aware": Feature.BATCH_JOB_AWARE,
}
ABSENT = {  # where each came from, or went
    "balance": "balance scheduling (vllm-ascend #9675)",
    "recompute": "recompute scheduler",
    "dynamic_batch": "dynamic batch (vllm-ascend #11933 removed SchedulerDynamicBatch and its "
    "SLO_limits_for_dynamic_batch)",
    "short_request_first": "ShortRequestFirst scheduling (vllm-ascend #11576)",
    "batch_job_aware": "batch-job-aware scheduler (vllm-ascend #12240)",
}

EARLIER_FORMS = {  # what a checkout without the classes driven has instead
    "short_request_first": " (before vllm-ascend #12719, v0.24.0rc, it is selected through the recompute "
    "scheduler of a decode node only)",
}


def _without_lookahead(defect: str, copy: str) -> str:
    """The known defect ``defect`` of a scheduler whose ``copy`` of vLLM's schedule keeps the first-scheduling rule
    from before vLLM #43733: the scheduler's, not the drafter's; it stops a run."""
    return (
        f"{defect}: vllm-ascend's {copy} of vLLM's Scheduler.schedule from before vLLM #43733, which gives a "
        "request's first scheduling from the waiting queue no lookahead slots (effective_lookahead_tokens = 0 while "
        "num_computed_tokens == 0): that step's drafts write the draft layer's KV past the request's blocks, where "
        "the runner's block-table row holds another request's block or the null block (read off the copy's source)"
    )


# the schedulers whose rule stops a run at its first admission: balance scheduling through v0.23.0, the dynamic
# batch through v0.23.0 (main's and v0.24.0rc's BalanceScheduler copies vLLM 0.24's, which gives the slots)
WITHOUT_LOOKAHEAD = {
    "balance": _without_lookahead(
        "balance-scheduler-first-scheduling-without-lookahead", "BalanceScheduler schedules by a copy"
    ),
    "dynamic_batch": _without_lookahead(
        "dynamic-batch-scheduler-first-scheduling-without-lookahead",
        "SchedulerDynamicBatch schedules by a decode-first copy",
    ),
}
VLLM_WITHOUT_LOOKAHEAD = Skip(
    "vllm-scheduler-first-scheduling-without-lookahead: the installed vLLM's own Scheduler.schedule (vLLM before 0.23,"
    " under the release branches up to v0.22.1rc) gives a request's first scheduling from the waiting queue no lookahead"
    " slots (effective_lookahead_tokens = 0 while num_computed_tokens == 0; vLLM 0.23 on, for asynchronous KV loads"
    " only): that step's drafts write the draft layer's KV past the request's blocks. vLLM's, not vllm-ascend's; it"
    " stops a run (read off vLLM's source; test_vllms_scheduler.py pins it)"
)
ASYNC_DISCARD = "async_tokens_to_discard"
RECOMPUTE_CRASH = Skip(
    "recompute-scheduler-reads-a-request-field-its-vllm-lacks: the checkout's RecomputeScheduler.update_from_output "
    f"(copied from vLLM 0.25.1's, vllm-ascend #12541) reads Request.{ASYNC_DISCARD} for every request that "
    "verified drafts, a field the installed vLLM's Request never sets (vLLM 0.27.1, main's since #14027): a decode "
    "node with the recompute scheduler and MTP raises AttributeError at its first step's output. A crash, not "
    "modelled; test_ascend_schedulers.py pins it"
)


@functools.cache
def lacks() -> dict[Feature, Skip]:
    """The scheduler features the checkout installed lacks, each with its reason, vLLM's own schedule's among them;
    made once per process."""
    found = (
        {Feature.VLLM_SCHEDULER: VLLM_WITHOUT_LOOKAHEAD} if schedulers.vllm_first_scheduling_without_lookahead() else {}
    )
    for name, feature in FEATURES.items():
        if not schedulers.path(name).exists():
            found[feature] = Skip(f"this vllm-ascend has no {ABSENT[name]}: {schedulers.path(name).name} is absent")
        elif missing := schedulers.missing_classes(name):
            found[feature] = Skip(
                f"this vllm-ascend's {ABSENT[name]} is not in the form driven here: it has no {', '.join(missing)}"
                f"{EARLIER_FORMS.get(name, '')}"
            )
        elif name in WITHOUT_LOOKAHEAD and schedulers.first_scheduling_without_lookahead(name):
            found[feature] = Skip(WITHOUT_LOOKAHEAD[name])
        elif name == "recompute" and schedulers.reads_a_request_field_vllm_lacks(name, ASYNC_DISCARD):
            found[feature] = RECOMPUTE_CRASH
    return found
