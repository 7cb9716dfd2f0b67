"""Run the whole gate on a broken variant, to time how fast it fails.

A pytest plugin for measurement only (the gate never loads it)::

    pytest -p tests.meta.broken_gate --impl broken:SlotPlusOne -x ...

registers one implementation per variant in tests/meta/broken_ops.py and
tests/meta/broken_proposers.py (``broken:NAME``: the variant's ops or proposer,
the core for the rest), and with ``MTP_BROKEN_PCP=NAME`` runs every PCP
property (on ranks and on a group of one) on tests/meta/broken_pcp.py's ``NAME`` instead of the real ``PcpProposer``;
``MTP_BROKEN_TP=NAME`` puts a variant of tests/meta/broken_tp.py or tests/meta/broken_sedp.py
in place of the TP proposer it breaks (lm-head TP, shared-expert DP, or PCP
with lm-head TP), and ``broken:NAME`` also takes tests/meta/broken_paths.py's
M-RoPE and eagle3 variants.
``-x`` then stops at the first test that sees the bug: the time to the first
failure (README, "Ordering and speed").
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os

import sim.impls
import sim.ranks.pcp
import sim.ranks.tp
from mtp.ops import CoreOps
from mtp.pcp_tp import PcpLmHeadTpProposer
from mtp.proposer import MtpProposer
from mtp.shared_expert_dp import SharedExpertDpProposer
from mtp.tp import LmHeadTpProposer
from sim.impls import Implementation
from tests.meta import broken_ops, broken_paths, broken_proposers, broken_sedp, broken_tp


def variants_of(module, base):
    return {
        name: cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls)
        and issubclass(cls, base)
        and cls.__module__ == module.__name__  # defined there, not imported
        and not name.startswith("_")
    }


def _proposers() -> dict:
    return {**variants_of(broken_proposers, MtpProposer), **variants_of(broken_paths, MtpProposer)}


def _implementation(name: str) -> Implementation:
    """The core with variant ``name`` in place of its preparation or its proposer; what the core lacks, it
    lacks (a property the core skips is skipped, not failed on the variant's account)."""
    ops, proposers = variants_of(broken_ops, CoreOps), _proposers()
    broken = {"ops": ops[name]()} if name in ops else {"proposer_cls": proposers[name]}
    return dataclasses.replace(sim.impls.core(), name=f"broken:{name}", describe="", **broken)


for _name in [*variants_of(broken_ops, CoreOps), *_proposers()]:
    sim.impls.BUILTIN[f"broken:{_name}"] = f"tests.meta.broken_gate:{_name}"
    globals()[_name] = functools.partial(_implementation, _name)

_PCP = os.environ.get("MTP_BROKEN_PCP")
if _PCP:
    _check_pcp = sim.ranks.pcp.check_pcp

    @functools.wraps(_check_pcp)
    def _broken_check_pcp(*args, proposer=None, **kwargs):
        return _check_pcp(*args, proposer=proposer or f"tests.meta.broken_pcp:{_PCP}", **kwargs)

    sim.ranks.pcp.check_pcp = _broken_check_pcp

    from mtp.pcp_proposer import PcpProposer
    from tests.meta import broken_pcp
    from tests.properties import test_group_of_one

    # ... and on a group of one (tests/properties/test_group_of_one.py), before it is collected.
    _at = test_group_of_one.GROUPED.index(PcpProposer)
    test_group_of_one.GROUPED[_at] = variants_of(broken_pcp, PcpProposer)[_PCP]


# The TP path each kind of broken TP proposer replaces: (lmhead_tp, shared_expert_dp, with PCP).
TP_PATHS = {
    PcpLmHeadTpProposer: (True, False, True),
    SharedExpertDpProposer: (False, True, False),
    LmHeadTpProposer: (True, False, False),
}


def tp_variants() -> dict[str, type]:
    """name -> class of every broken TP proposer."""
    return {**variants_of(broken_tp, LmHeadTpProposer), **variants_of(broken_sedp, SharedExpertDpProposer)}


_TP = os.environ.get("MTP_BROKEN_TP")
if _TP:
    _cls = tp_variants()[_TP]
    _path = next(path for base, path in TP_PATHS.items() if issubclass(_cls, base))
    sim.ranks.tp.PROPOSERS[_path] = f"{_cls.__module__}:{_TP}"
