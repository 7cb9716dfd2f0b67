"""A pytest plugin for the meta-tests of known defects (never loaded by the gate).

Registers two implementations that declare the 0.13-era proposer's padded seq_lens defect as a
known defect, modelled by its rule: ``defect:present``, the core with that defect
(``broken_ops.PaddedSeqLensNotLowered``), and ``defect:fixed``, the core itself, whose list still
names the defect it no longer has.
"""

from __future__ import annotations

import functools

import sim.impls
from mtp.ops import CoreOps
from mtp.proposer import MtpProposer
from sim.impls import Implementation
from sim.impls.divergence import Divergence, Kind, rules_of
from tests.meta.broken_ops import PaddedSeqLensNotLowered

DEFECT = Divergence(
    "padded-seq-lens-not-lowered",
    "CoreOps.prepare_padded",
    "steps 2..K attend to (seq_len - n_rej) + j - 1 keys",
    "padded mode never lowers seq_lens",
    "test_known_defects.py::test_the_spec_fails_on_each_known_defect",
    kind=Kind.DEFECT,
    rule={"padded_seq_lens_lowered": False},
)


def implementation(name: str, ops) -> Implementation:
    return Implementation(name, ops, MtpProposer, rules=rules_of([DEFECT]), divergences=(DEFECT,))


present = functools.partial(implementation, "defect:present", PaddedSeqLensNotLowered())
fixed = functools.partial(implementation, "defect:fixed", CoreOps())
sim.impls.BUILTIN["defect:present"] = "tests.meta.known_defect_gate:present"
sim.impls.BUILTIN["defect:fixed"] = "tests.meta.known_defect_gate:fixed"
