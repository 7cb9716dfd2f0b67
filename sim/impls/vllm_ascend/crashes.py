"""Known defects that crash, sidestepped everywhere but where their pin runs them.

A defect that raises leaves nothing to follow: what the checkout would have drafted after the crash does
not exist. So that everything else is still compared on a checkout that has one, the harness takes, at
the place the crash would begin, the one step of its upstream fix that removes it (``SIDESTEPS``), and
nowhere else; the defect's pin runs without it (``letting``) and records the crash, or, on a checkout that no longer crashes, the spec's values, so the session says it
is fixed (``tests.checks.known_defects.pin``). A sidestep applies where the checkout's generation has the
defect (``branch_divergences.in_force``); on a fixed checkout it changes nothing (the fix already did it).
"""

from __future__ import annotations

import contextlib

from sim.impls.vllm_ascend import branch_divergences, generation

SIDESTEPS = {
    branch_divergences.DUMMY_STALE_INDICES.id: "the drafter's sample indices cleared before its dummy run (vllm-ascend #10080)",
    branch_divergences.PADDING_STALE_INDICES.id: "the drafter's sample indices cleared before each call, so that past the "
    "call's own only zeros are left (vllm-ascend #9867)",
    branch_divergences.MTP_MODEL_GRAPH.id: "an MTP draft's whole merged draft captured, not its model (vllm-ascend #6860)",
}
_let: set[str] = set()  # the defects whose crash a pin is running


def sidestepped(defect: str) -> bool:
    """Whether the harness sidesteps ``defect``'s crash now: the checkout's generation has it, and no pin runs it."""
    return defect not in _let and defect in branch_divergences.in_force(generation.name()).DIVERGENCES


@contextlib.contextmanager
def letting(defect: str):
    """Inside, ``defect`` crashes as the checkout has it (its pin)."""
    if defect not in SIDESTEPS:
        raise KeyError(f"{defect!r}: not a sidestepped crash ({', '.join(SIDESTEPS)})")
    _let.add(defect)
    try:
        yield
    finally:
        _let.discard(defect)
