"""A named difference between an implementation under test and docs/DESIGN.md, with its kind.

Three kinds (docs/DESIGN.md, "Implementations under test and their divergences"):

- ``DESIGN``: the implementation chose otherwise; its behaviour replaces the spec for it.
- ``DEFECT``: the implementation is wrong. Its behaviour is modelled so that everything else is
  still compared, but it never becomes the truth: the spec property runs as a strict expected
  failure (tests/properties/test_known_defects.py), so the day it is fixed the run says so.
- ``ARTIFACT``: a consequence of the harness's setting (a CPU device, the fake ``torch_npu``),
  on the devices it names only.

``rule``: the ``Rules`` fields (sim/oracle/rules.py) that model it; an implementation's rules are
the union of its divergences' (``rules_of``), so the table is the one place they are stated.
``setting``: the ``Scenario`` fields a serving run needs for it to show (a draft of several
attention groups), where the default scenario cannot show it; the known-defect property runs its
scenarios so.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from enum import Enum

from sim.oracle.rules import CORE, Rules


class Kind(str, Enum):
    DESIGN = "design"
    DEFECT = "defect"
    ARTIFACT = "artifact"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Divergence:
    """id: named once, in every table and report. where: the implementation's function. core: what
    docs/DESIGN.md says. impl: what the implementation does. pinned_by: ``MODULE.py::TEST`` of the
    implementation's differential suite that shows it."""

    id: str
    where: str
    core: str
    impl: str
    pinned_by: str
    kind: Kind = Kind.DESIGN
    rule: dict = field(default_factory=dict)
    devices: tuple[str, ...] | None = None  # an artifact's devices; None: every device
    setting: dict = field(default_factory=dict)  # Scenario fields it needs to show, where the default hides it
    # the draft attention families (Scenario.draft_attn) it holds for, where its kernels read what it changes;
    # None: every family
    families: tuple[str, ...] | None = None
    # FILE:LINE of the table naming it (where a fixed defect is dropped from the list); found, not given
    declared_at: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        unknown = set(self.rule) - {f.name for f in dataclasses.fields(Rules)}
        if unknown:
            raise ValueError(f"{self.id}: rule names no Rules field: {sorted(unknown)}")
        if not self.declared_at:
            object.__setattr__(self, "declared_at", _declared_at(self.id))

    def label(self) -> str:
        return f"{self.id} ({self.kind})"

    def holds_for(self, scenario) -> bool:
        """Whether it holds in a serving run of ``scenario``: of a draft attention family it names (``families``)."""
        return self.families is None or scenario.draft_attn in self.families


def _declared_at(ident: str) -> str:
    """FILE:LINE of the first line naming ``ident`` in the module that builds this divergence."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename in (__file__, "<string>"):  # <string>: dataclass __init__
        frame = frame.f_back
    if frame is None:
        return ""
    path = frame.f_code.co_filename
    try:
        with open(path) as f:
            line = next((n for n, text in enumerate(f, start=1) if f'"{ident}"' in text), frame.f_lineno)
    except OSError:
        line = frame.f_lineno
    return f"{os.path.relpath(path)}:{line}"


def table(*divergences: Divergence) -> dict[str, Divergence]:
    """id -> divergence; an id named twice is refused."""
    found: dict[str, Divergence] = {}
    for d in divergences:
        if d.id in found:
            raise ValueError(f"divergence {d.id!r} is named twice")
        found[d.id] = d
    return found


def rules_of(divergences) -> Rules:
    """The rules that model every divergence of ``divergences`` (the spec's where none says otherwise),
    each known defect among them named as an alternative (``Rules.defects``)."""
    fields: dict = {}
    defects = []
    for d in divergences:
        fields |= d.rule
        if d.kind is Kind.DEFECT and d.rule:
            defects.append((d.id, tuple(d.rule)))
    return dataclasses.replace(CORE, defects=tuple(defects), **fields)


def spec_for(rules: Rules, defect: Divergence) -> Rules:
    """``rules`` with ``defect`` no longer modelled: what the spec demands of that one behaviour."""
    return rules.unmodelled(defect.id, defect.rule)
