"""What a gate property uses of an implementation beyond its eager, padded loop.

An implementation that cannot run a feature says so once, with the reason
(``Implementation.lacks``); a property says which features it uses (the ``uses`` mark,
tests/checks/modes.py); a property that runs the implementation under test and uses a feature
it lacks is skipped with the implementation's reason. No test name is involved: renaming a
property changes nothing an adapter declares, and an adapter's author need not know the gate's
tests.
"""

from __future__ import annotations

import enum


class Feature(enum.Enum):
    PIECEWISE_GRAPHS = "piecewise graphs"
    FULL_GRAPHS = "full graphs"
    UNPADDED = "the unpadded path (disable_padded_drafter_batch)"
    UNPADDED_FULL_GRAPHS = "full graphs on the unpadded path"
    DRAFT_MODEL_FULL_GRAPHS = "full graphs for a draft model"
    DRAFT_MODEL_KERNEL_BLOCKS = "a draft model over a hybrid target's kernel blocks"
    MLA_FULL_GRAPHS = "full graphs for an MLA draft layer"
    SFA_FULL_GRAPHS = "full graphs for an SFA draft layer"
    HOST_SYNC_COUNT = "a count of the padded path's host syncs"
    DUMMY_RUN = "the drafter's part of the runner's dummy run (a rank with no requests keeping step with its peers)"
    DRAFT_ATTN_GROUPS = "a draft whose layers form several attention groups (Scenario.draft_attn_groups)"
    MLA_DRAFT = "an MLA draft layer, its metadata (RoPE included) built by the implementation's MLA builder (Scenario.draft_attn)"
    SFA_DRAFT = "an SFA draft layer, its metadata (RoPE included) built by the implementation's SFA builder (Scenario.draft_attn)"
    EAGLE = "an EAGLE-1 drafter: a draft head of its own on the target's last hidden states (Scenario.method)"
    EAGLE3 = "an EAGLE-3 drafter: the target hands three layers, folded by the draft (Scenario.method)"
    DRAFT_MODEL = (
        "a draft model: a language model of its own on the token ids, one row more per request (Scenario.method)"
    )
    MROPE = "M-RoPE: a multimodal target's three rows of positions (Scenario.mrope)"
    ASYNC_SCHEDULING = "the model runner's asynchronous scheduling (Scenario.async_scheduling)"
    RUNNER_SAMPLES = "the model runner's own sampling of the target's tokens (Scenario.runner_samples)"
    VLLM_SCHEDULER = "the steps vLLM's own scheduler makes: its chunks, blocks and preemption (Scenario.scheduler)"
    BALANCE_SCHEDULING = (
        "vllm-ascend's balance scheduling: its BalanceScheduler's own copy of vLLM's schedule (Scenario.scheduler)"
    )
    RECOMPUTE_SCHEDULER = "vllm-ascend's recompute scheduler of a PD decode node (Scenario.scheduler)"
    DYNAMIC_BATCH = (
        "vllm-ascend's dynamic batch: its SchedulerDynamicBatch's own copy of vLLM's schedule (Scenario.scheduler)"
    )
    SHORT_REQUEST_FIRST = "vllm-ascend's ShortRequestFirst waiting queue over vLLM's schedule (Scenario.scheduler)"
    BATCH_JOB_AWARE = (
        "vllm-ascend's batch-job-aware waiting queue and block reserve over vLLM's schedule (Scenario.scheduler)"
    )
    KERNEL_BLOCKS = (
        "a hybrid target's attention blocks split into kernel blocks, the runner's table of them"
        " (Scenario.kernel_block_size)"
    )
    REDUCE_SAMPLE = "reduce sampling on TP ranks: each rank samples its slice of the vocabulary (enable_reduce_sample)"


GRAPHS = (Feature.PIECEWISE_GRAPHS, Feature.FULL_GRAPHS)
DRAFT_ATTN_FEATURES = {"mla": Feature.MLA_DRAFT, "sfa": Feature.SFA_DRAFT}  # a draft family's feature (not GQA's)


# A feature used by the combination of two others alone, and those two.
COMBINED = {
    Feature.UNPADDED_FULL_GRAPHS: frozenset({Feature.UNPADDED, Feature.FULL_GRAPHS}),
    Feature.DRAFT_MODEL_FULL_GRAPHS: frozenset({Feature.DRAFT_MODEL, Feature.FULL_GRAPHS}),
    Feature.DRAFT_MODEL_KERNEL_BLOCKS: frozenset({Feature.DRAFT_MODEL, Feature.KERNEL_BLOCKS}),
    Feature.MLA_FULL_GRAPHS: frozenset({Feature.MLA_DRAFT, Feature.FULL_GRAPHS}),
    Feature.SFA_FULL_GRAPHS: frozenset({Feature.SFA_DRAFT, Feature.FULL_GRAPHS}),
}


def used(features) -> frozenset[Feature]:
    """``features`` with what their combination uses besides (``COMBINED``: unpadded with full graphs, a
    draft model with full graphs or with kernel blocks, an MLA or SFA draft with full graphs)."""
    found = frozenset(features)
    return found | {combined for combined, parts in COMBINED.items() if parts <= found}
