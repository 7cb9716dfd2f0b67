"""The shape every adapter's divergences module shares: what it cannot run, built one way.

An adapter's ``divergences`` module holds ``DIVERGENCES`` (``sim.impls.divergence.table``),
``RULES`` (``rules_of`` them) and ``LACKS``: the features it cannot run (``sim.impls.features``),
each with its reason. Two recur: graphs (the adapters drive their proposers eagerly only;
vllm-ascend's, which runs its full graphs on the simulator, names its own) and, for a proposer
whose host copies are torch CPU tensors, the count of host syncs on the CPU simulator (where host
copies cannot be told from device reads).
"""

from __future__ import annotations

from sim.impls import Skip
from sim.impls.features import GRAPHS, Feature

COUNTED_AS_SYNCS = "on a CPU device the simulator counts them as syncs"


def host_copies(who: str, reads: str, why: str = COUNTED_AS_SYNCS) -> Skip:
    """No host-sync count on the simulator: ``who`` keeps its host copies (``reads``) as CPU tensors."""
    return Skip(
        f"{who} keeps its host copies as torch CPU tensors ({reads}); {why}",
        devices=("sim",),  # on an accelerator the host copies are host memory the watcher tells apart
    )


ONE_DRAFT_LAYER = Skip("the adapter builds a draft of one attention layer, in one attention group")
GQA_DRAFT = Skip("the adapter's draft layer is the tiny GQA attention, rotated by its rows' positions")
MTP_ONLY = Skip("the adapter builds its proposer for method mtp (the tiny DeepSeek-V3's MTP layer)")
NO_DRAFT_MODEL = Skip(
    "the adapter does not build its drafter for method draft_model (a draft language model of its own)"
)
TEXT_ONLY = Skip("the adapter's target is a text-only model: its positions are one row")
SYNC_RUNNER = Skip("the adapter drives its proposer as a synchronous runner does: nothing is counted ahead")
WHOLE_BLOCKS = Skip("the adapter hands its proposer the batch's block table as it is: no runner splits its blocks")
HANDED_SAMPLES = Skip("the adapter hands its proposer the sampled tokens; no runner of the implementation samples them")


def lacks(eager_only: str, host_sync: Skip | None = None, more: dict[Feature, Skip] | None = None, has=()) -> dict:
    """``LACKS``: ``more``, the host-sync count if ``host_sync`` is given, every graph mode on every
    device with the reason ``eager_only``, and, unless ``more`` says otherwise or ``has`` names them, a
    draft of several attention groups, an MLA or SFA draft, an EAGLE-1 or EAGLE-3 drafter, a draft model,
    M-RoPE, asynchronous scheduling, the runner's own sampling and its kernel blocks (``ONE_DRAFT_LAYER``,
    ``GQA_DRAFT``, ``MTP_ONLY``, ``NO_DRAFT_MODEL``, ``TEXT_ONLY``, ``SYNC_RUNNER``, ``HANDED_SAMPLES``,
    ``WHOLE_BLOCKS``)."""
    lacking = {
        Feature.DRAFT_ATTN_GROUPS: ONE_DRAFT_LAYER,
        Feature.MLA_DRAFT: GQA_DRAFT,
        Feature.SFA_DRAFT: GQA_DRAFT,
        Feature.EAGLE: MTP_ONLY,
        Feature.EAGLE3: MTP_ONLY,
        Feature.DRAFT_MODEL: NO_DRAFT_MODEL,
        Feature.MROPE: TEXT_ONLY,
        Feature.ASYNC_SCHEDULING: SYNC_RUNNER,
        Feature.RUNNER_SAMPLES: HANDED_SAMPLES,
        Feature.KERNEL_BLOCKS: WHOLE_BLOCKS,
        **(more or {}),
    }
    for feature in has:
        del lacking[feature]
    if host_sync is not None:
        lacking[Feature.HOST_SYNC_COUNT] = host_sync
    lacking.update(dict.fromkeys(GRAPHS, Skip(eager_only)))
    return lacking
