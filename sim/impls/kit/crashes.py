"""Known defects that crash, sidestepped everywhere but where their pin runs them.

A defect that raises leaves nothing to follow: what the checkout would have drafted after the crash does
not exist. So that everything else is still compared on a checkout that has one, an adapter takes, at the
place the crash would begin, the one step of its upstream fix that removes it (its ``SIDESTEPS``), and
nowhere else; the defect's pin runs without it (``letting``) and records the crash, or, on a checkout that no
longer crashes, the spec's values, so the session says it is fixed (``tests.checks.known_defects.pin``). A
sidestep applies where the checkout's generation has the defect (the adapter's table in force); on a fixed
checkout it changes nothing (the fix already did it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Container


class Sidesteps:
    """One adapter's sidestepped crashes: ``steps`` (defect id -> the step of its fix taken), ``in_force`` the
    ids of the checkout's table."""

    def __init__(self, steps: dict[str, str], in_force: Callable[[], Container[str]]):
        self.steps, self._in_force = steps, in_force
        self._let: set[str] = set()  # the defects whose crash a pin is running

    def sidestepped(self, defect: str) -> bool:
        """Whether ``defect``'s crash is sidestepped now: the checkout's generation has it, and no pin runs it."""
        return defect not in self._let and defect in self._in_force()

    @contextlib.contextmanager
    def letting(self, defect: str):
        """Inside, ``defect`` crashes as the checkout has it (its pin)."""
        if defect not in self.steps:
            raise KeyError(f"{defect!r}: not a sidestepped crash ({', '.join(self.steps)})")
        self._let.add(defect)
        try:
            yield
        finally:
            self._let.discard(defect)
