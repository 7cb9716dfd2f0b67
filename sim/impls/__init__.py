"""Implementations under test: the proposer the gate checks, found by name.

An implementation is the input preparation (a ``CoreOps``-compatible object)
plus a proposer class with ``MtpProposer``'s constructor and ``propose``.
The project's own core is ``core``; adapters for other proposers (vLLM's
``EagleProposer``, vllm-ascend's ``MtpProposer`` on an NPU runner) register
under ``mtp_harness.impls`` as ``name = "package.module:factory"``, where the
factory returns an ``Implementation``. Nothing is imported until asked for.

Each adapter has its own sub-package here, holding what its upstream generation does
differently (``vllm``: vLLM 0.33's ``EagleProposer``; ``vllm_mrv2``: vLLM's Model Runner V2
``MTPSpeculator``; ``vllm_ascend``: vllm-ascend's ``AscendEagleProposer``, 0.23.0 or main, what
differs between them found by signature in ``generation``; ``vllm_ascend_mrv2``: vllm-ascend's MRV2
MTP speculator, 0.23.0 or main; ``vllm_ascend_0_13``: 0.13.0's ``MtpProposer``). Each imports the
adapter kit (``kit``, ``kit.ascend``) and itself only: what two adapters share lives in the kit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from devices.plugins import load_factory
from sim.impls.divergence import Kind, rules_of
from sim.impls.features import COMBINED, DRAFT_ATTN_FEATURES, Feature, used
from sim.oracle.rules import CORE, Rules

ENTRY_POINT_GROUP = "mtp_harness.impls"
BUILTIN = {
    "core": "sim.impls:core",
    "vllm": "sim.impls.vllm.adapter:implementation",
    "vllm_ascend": "sim.impls.vllm_ascend.adapter:implementation",
    "vllm_ascend_0_13": "sim.impls.vllm_ascend_0_13.adapter:implementation",
    "vllm_mrv2": "sim.impls.vllm_mrv2.adapter:implementation",
    "vllm_ascend_mrv2": "sim.impls.vllm_ascend_mrv2.adapter:implementation",
}


@dataclass(frozen=True)
class Skip:
    """A feature an implementation cannot run, why, and on which devices (``None``: on every one).

    The last resort: a skip is printed with its reason on every run where it applies, and nowhere else.
    """

    reason: str
    devices: tuple[str, ...] | None = None

    def applies_to(self, device: str) -> bool:
        return self.devices is None or device in self.devices


@dataclass(frozen=True)
class Implementation:
    """name: shown in the report header. ops: steps 1-4. proposer_cls: the
    full loop. rules: the documented divergences the reference models, so the
    gate's properties run on them. lacks: the features it cannot run
    (``sim.impls.features``) -> the ``Skip`` saying why (a plain string: a
    reason that holds on every device). divergences: the named differences from
    docs/DESIGN.md in force (``sim.impls.divergence``), shown on every run.
    describe: what exactly is under test, for the report header (versions,
    the checkout's commit); the name by default. host_reads: the reads of host
    tensors its own code makes, which a CPU run counts as syncs
    (``sim.impls.kit.host_reads``). divergence_list: the file its accepted divergences were read from
    (``--divergences``; ``accepting_list``), which a failure's replay command names."""

    name: str
    ops: object
    proposer_cls: type
    lacks: dict[Feature, Skip | str] = field(default_factory=dict)
    rules: Rules = CORE
    divergences: tuple = ()
    describe: str = ""
    host_reads: tuple = ()
    divergence_list: str | None = None

    def __post_init__(self):
        if not self.describe:
            object.__setattr__(self, "describe", self.name)

    def defects(self, device: str) -> list:
        """The known defects in force on ``device``, each modelled by a rule (the ones the gate can see)."""
        return [d for d in self.in_force(device) if d.kind is Kind.DEFECT and d.rule]

    def in_force(self, device: str) -> list:
        """The divergences that apply on ``device`` (an artifact names its devices)."""
        return [d for d in self.divergences if d.devices is None or device in d.devices]

    def accepting(self, ids) -> tuple[Implementation, list[str]]:
        """This implementation with only the divergences ``ids`` accepted (the rest held to the spec),
        and the ids that name none of its divergences. ``ids``: a list, or id -> where it is listed
        (``read_divergence_list``), which then becomes each kept divergence's ``declared_at`` (the list a
        fixed defect is dropped from)."""
        known = {d.id for d in self.divergences}
        places = ids if isinstance(ids, dict) else {}
        kept = tuple(
            replace(d, declared_at=places.get(d.id, d.declared_at)) for d in self.divergences if d.id in set(ids)
        )
        return replace(self, divergences=kept, rules=rules_of(kept)), [i for i in ids if i not in known]

    def accepting_list(self, path) -> tuple[Implementation, list[str]]:
        """``accepting`` the ids of the list file ``path`` (``read_divergence_list``; ``OSError`` if it
        cannot be read), the result naming the file."""
        kept, unknown = self.accepting(read_divergence_list(path))
        return replace(kept, divergence_list=str(path)), unknown

    def lacking(self, features, device: str) -> str | None:
        """Why a property using ``features`` cannot run on ``device`` (the first lacking feature's
        reason, naming it), or None."""
        needed = used(features)
        for feature in (f for f in Feature if f in needed):  # in the order Feature names them
            skip = self.lacks.get(feature)
            skip = Skip(skip) if isinstance(skip, str) else skip
            if skip is not None and skip.applies_to(device):
                return f"lacks {feature.value}: {skip.reason}"
        return None

    def refuses(self, scenario, device: str) -> str | None:
        """Why a serving run of ``scenario`` cannot run on ``device``, for what the scenario selects
        that the implementation lacks (its padding and graph mode, and their combination with its method;
        its draft's attention groups and family, its method, M-RoPE, async scheduling, runner sampling,
        vLLM's scheduler), or None."""
        selected = {
            Feature.UNPADDED: not scenario.padded and "padded=False",
            Feature.PIECEWISE_GRAPHS: scenario.graph_mode == "piecewise" and "graph_mode='piecewise'",
            Feature.FULL_GRAPHS: scenario.graph_mode == "full" and "graph_mode='full'",
            Feature.DRAFT_ATTN_GROUPS: scenario.draft_attn_groups > 1
            and f"draft_attn_groups={scenario.draft_attn_groups}",
            Feature.EAGLE: scenario.method == "eagle" and f"method={scenario.method!r}",
            Feature.EAGLE3: scenario.method == "eagle3" and f"method={scenario.method!r}",
            Feature.DRAFT_MODEL: scenario.method == "draft_model" and f"method={scenario.method!r}",
            Feature.MROPE: scenario.mrope and "mrope=True",
            Feature.ASYNC_SCHEDULING: scenario.async_scheduling and "async_scheduling=True",
            Feature.RUNNER_SAMPLES: scenario.runner_samples and "runner_samples=True",
            Feature.KERNEL_BLOCKS: scenario.kernel_block_size and f"kernel_block_size={scenario.kernel_block_size}",
            Feature.VLLM_SCHEDULER: scenario.scheduler != "own" and f"scheduler={scenario.scheduler!r}",
        }
        if scenario.draft_attn in DRAFT_ATTN_FEATURES:
            selected[DRAFT_ATTN_FEATURES[scenario.draft_attn]] = f"draft_attn={scenario.draft_attn!r}"
        selected = {feature: chosen for feature, chosen in selected.items() if chosen}
        for combined in used(selected) - selected.keys():
            selected[combined] = " with ".join(
                chosen for part, chosen in selected.items() if part in COMBINED[combined]
            )
        for feature, chosen in selected.items():
            reason = self.lacking({feature}, device)
            if reason is not None:
                return f"{chosen}: {self.name} {reason}"
        return None


def read_divergence_list(path) -> dict[str, str]:
    """The divergence ids a file accepts, each with the ``PATH:LINE`` naming it: one per line, ``#``
    comments and blank lines ignored (the list an implementation's own repository keeps, like
    array-api-tests' ``xfails.txt``)."""
    ids = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            ids.setdefault(entry, f"{path}:{n}")
    return ids


class ImplementationUnavailable(RuntimeError):
    def __init__(self, name: str, cause: str):
        super().__init__(f"implementation '{name}' is unavailable: {cause}")


class NotInThisCheckout(ImplementationUnavailable):
    """The code under test has no runnable implementation ``name``, as a measured fact of that code (a
    release branch whose MRV2 speculator does not run on the vLLM the branch pairs with): a session
    that asks for it says so in one line and runs nothing, and that is not a failure of the gate."""

    def __init__(self, name: str, cause: str):
        RuntimeError.__init__(self, f"implementation '{name}' is not in this checkout: {cause}")


def core() -> Implementation:
    from mtp.ops import CoreOps
    from mtp.proposer import MtpProposer

    return Implementation(
        "core",
        CoreOps(),
        MtpProposer,
        lacks={
            Feature.DRAFT_ATTN_GROUPS: "the core's draft model is one attention layer (mtp.model.DraftModel)",
            Feature.MLA_DRAFT: "the core's draft model rotates by its rows' positions (mtp.model.DraftModel)",
            Feature.SFA_DRAFT: "the core's draft model rotates by its rows' positions (mtp.model.DraftModel)",
            Feature.ASYNC_SCHEDULING: "the core is the proposer alone: asynchronous scheduling is a model runner's",
            Feature.RUNNER_SAMPLES: "the core is the proposer alone: sampling the target's tokens is a model runner's",
            Feature.KERNEL_BLOCKS: "the core is the proposer alone: a runner's table of kernel blocks is a model runner's",
        },
    )


def load_implementation(name: str) -> Implementation:
    """The implementation called ``name``; ``ImplementationUnavailable`` names the cause otherwise."""
    return load_factory(ENTRY_POINT_GROUP, BUILTIN, name, ImplementationUnavailable)()
