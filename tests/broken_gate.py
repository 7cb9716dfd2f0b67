"""Run the whole gate on a broken variant, to time how fast it fails.

A pytest plugin for measurement only (the gate never loads it)::

    pytest -p tests.broken_gate --impl broken:SlotPlusOne -x ...

registers one implementation per variant in tests/broken_ops.py and
tests/broken_proposers.py (``broken:NAME``: the variant's ops or proposer,
the core for the rest), and with ``MTP_BROKEN_PCP=NAME`` runs every PCP
property on tests/broken_pcp.py's ``NAME`` instead of the real ``PcpProposer``.
``-x`` then stops at the first test that sees the bug: the time to the first
failure (README, "Ordering and speed").
"""

from __future__ import annotations

import functools
import inspect
import os

import sim.impls
import sim.ranks.pcp
from mtp.ops import CoreOps
from mtp.proposer import MtpProposer
from sim.impls import Implementation
from tests import broken_ops, broken_proposers


def variants_of(module, base):
    return {
        name: cls
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, base) and cls is not base and not name.startswith("_")
    }


def _implementation(name: str) -> Implementation:
    ops, proposers = variants_of(broken_ops, CoreOps), variants_of(broken_proposers, MtpProposer)
    if name in ops:
        return Implementation(f"broken:{name}", ops[name](), MtpProposer)
    return Implementation(f"broken:{name}", CoreOps(), proposers[name])


for _name in [*variants_of(broken_ops, CoreOps), *variants_of(broken_proposers, MtpProposer)]:
    sim.impls.BUILTIN[f"broken:{_name}"] = f"tests.broken_gate:{_name}"
    globals()[_name] = functools.partial(_implementation, _name)

_PCP = os.environ.get("MTP_BROKEN_PCP")
if _PCP:
    _check_pcp = sim.ranks.pcp.check_pcp

    @functools.wraps(_check_pcp)
    def _broken_check_pcp(*args, proposer=None, **kwargs):
        return _check_pcp(*args, proposer=proposer or f"tests.broken_pcp:{_PCP}", **kwargs)

    sim.ranks.pcp.check_pcp = _broken_check_pcp
