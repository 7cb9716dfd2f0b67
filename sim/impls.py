"""Implementations under test: the proposer the gate checks, found by name.

An implementation is the input preparation (a ``CoreOps``-compatible object)
plus a proposer class with ``MtpProposer``'s constructor and ``propose``.
The project's own core is ``core``; adapters for other proposers (vLLM's
``EagleProposer``, vllm-ascend's ``MtpProposer`` on an NPU runner) register
under ``mtp_harness.impls`` as ``name = "package.module:factory"``, where the
factory returns an ``Implementation``. Nothing is imported until asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points

ENTRY_POINT_GROUP = "mtp_harness.impls"
BUILTIN = {"core": "sim.impls:core", "vllm": "sim.vllm_adapter:implementation"}


@dataclass(frozen=True)
class Implementation:
    """name: shown in the report header. ops: steps 1-4. proposer_cls: the
    full loop. skips: property name -> reason it does not apply (documented
    divergences; never silent)."""

    name: str
    ops: object
    proposer_cls: type
    skips: dict[str, str] = field(default_factory=dict)


class ImplementationUnavailable(RuntimeError):
    def __init__(self, name: str, cause: str):
        super().__init__(f"implementation '{name}' is unavailable: {cause}")


def core() -> Implementation:
    from mtp.ops import CoreOps
    from mtp.proposer import MtpProposer

    return Implementation("core", CoreOps(), MtpProposer)


def _registry() -> dict[str, str]:
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def load_implementation(name: str) -> Implementation:
    registry = _registry()
    if name not in registry:
        raise ImplementationUnavailable(name, f"unknown; known: {', '.join(sorted(registry))}")
    module_name, _, attr = registry[name].partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise ImplementationUnavailable(name, f"cannot import {registry[name]}: {exc}") from exc
    return factory()
