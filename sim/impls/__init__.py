"""Implementations under test: the proposer the gate checks, found by name.

An implementation is the input preparation (a ``CoreOps``-compatible object)
plus a proposer class with ``MtpProposer``'s constructor and ``propose``.
The project's own core is ``core``; adapters for other proposers (vLLM's
``EagleProposer``, vllm-ascend's ``MtpProposer`` on an NPU runner) register
under ``mtp_harness.impls`` as ``name = "package.module:factory"``, where the
factory returns an ``Implementation``. Nothing is imported until asked for.

Each adapter has its own sub-package here (``vllm``: adapter, interop with
vLLM's types, the tiny model behind vLLM's interface, divergences; ``vllm_ascend``:
vllm-ascend 0.23.0's ``AscendEagleProposer`` on the same pieces).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.plugins import load_factory
from sim.oracle.rules import CORE, Rules

ENTRY_POINT_GROUP = "mtp_harness.impls"
BUILTIN = {
    "core": "sim.impls:core",
    "vllm": "sim.impls.vllm.adapter:implementation",
    "vllm_ascend": "sim.impls.vllm_ascend.adapter:implementation",
    "vllm_ascend_0_13": "sim.impls.vllm_ascend_0_13.adapter:implementation",
}


@dataclass(frozen=True)
class Implementation:
    """name: shown in the report header. ops: steps 1-4. proposer_cls: the
    full loop. rules: the documented divergences the reference models, so the
    gate's properties run on them. skips: property name -> reason it cannot
    run at all (the last resort; never silent). describe: what exactly is under
    test, for the report header (versions, the checkout's commit); the name by default."""

    name: str
    ops: object
    proposer_cls: type
    skips: dict[str, str] = field(default_factory=dict)
    rules: Rules = CORE
    describe: str = ""

    def __post_init__(self):
        if not self.describe:
            object.__setattr__(self, "describe", self.name)


class ImplementationUnavailable(RuntimeError):
    def __init__(self, name: str, cause: str):
        super().__init__(f"implementation '{name}' is unavailable: {cause}")


def core() -> Implementation:
    from mtp.ops import CoreOps
    from mtp.proposer import MtpProposer

    return Implementation("core", CoreOps(), MtpProposer)


def load_implementation(name: str) -> Implementation:
    """The implementation called ``name``; ``ImplementationUnavailable`` names the cause otherwise."""
    return load_factory(ENTRY_POINT_GROUP, BUILTIN, name, ImplementationUnavailable)()
