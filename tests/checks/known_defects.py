"""When a session's evidence says a known defect is fixed: one line, and the session fails.

A known defect is an alternative to the spec, never the expectation: every serving run records,
per call, whether it followed the spec or the defect where the defect decides a value attention is
given (``sim.serving.checker.CallCheck``), and the differential suites' pins record what they saw
(``pin``). Over the session (summed on the controller under xdist, from each test's JUnit
properties), a defect that only the spec was seen following is fixed; one seen following both is
partly fixed. Either ends the session with one line naming the place of the list the id came from,
and nothing else fails because of it. The strict expected failure of the defect's spec
(tests/properties/test_known_defects.py) says the same when it passes.
"""

from __future__ import annotations

from collections import Counter

from sim.serving.checker import DEFECT, SPEC
from tests.checks.e2e_checks import TALLY, followed_key


def fixed_line(defect) -> str:
    """The one line a fixed ``defect`` (a ``Divergence``) ends the session with."""
    return f"fixed: {defect.id} no longer present; drop it from the list ({defect.declared_at})"


def pin(defect: str, present: bool, fixed: bool, detail: object = "") -> str | None:
    """A pin of the differential suite: it saw ``defect``'s values (``present``), the spec's (``fixed``;
    recorded, so the session says it is fixed), or, where the two agree, either (None). Neither fails,
    naming ``detail``. Returns ``DEFECT``, ``SPEC`` or None, so a pin asserts more of the defect only
    where it is there."""
    if present and fixed:
        return None
    if not (present or fixed):
        raise AssertionError(f"{defect}: neither the defect's values nor the spec's: {detail}")
    followed = DEFECT if present else SPEC
    TALLY[followed_key(defect, followed)] += 1
    return followed


def pin_a_crash(impl, defect: str, run, letting, crash: type[BaseException], says: str) -> None:
    """``run()`` as the checkout has it (``letting(defect)``: the adapter's crash not sidestepped): where the session
    accepts ``defect``, its ``crash`` (saying ``says``) is the defect and a run that passes is the spec (fixed);
    dropped from the list, the run must pass."""
    accepted = any(d.id == defect for d in impl.divergences)
    try:
        with letting(defect):
            run()
    except crash as raised:
        if not accepted:
            raise
        assert says in str(raised), raised
        pin(defect, present=True, fixed=False)
    else:
        if accepted:
            pin(defect, present=False, fixed=True)


def pin_run(report, defect: str) -> str:
    """What a pin's serving run (a ``RunReport`` under rules that model ``defect``) followed for it,
    recorded; a run that followed both, or never met it, fails."""
    spec, present = report.followed[(defect, SPEC)], report.followed[(defect, DEFECT)]
    if not (spec or present):
        raise AssertionError(f"{defect}: the run never met it ({report.iterations} iterations)")
    if spec and present:
        raise AssertionError(f"{defect}: {spec} calls followed the spec, {present} the defect")
    return pin(defect, bool(present), bool(spec), report.followed)


def verdicts(defects, compared: Counter) -> list[str]:
    """For each of ``defects`` the session's calls and pins followed the spec for: the fixed line, or,
    where they followed the defect too, the partly-fixed line."""
    out = []
    for d in defects:
        spec, defect = compared[followed_key(d.id, SPEC)], compared[followed_key(d.id, DEFECT)]
        if spec and not defect:
            out.append(fixed_line(d))
        elif spec:
            out.append(
                f"partly fixed: {d.id}: {spec} calls followed the spec, {defect} the defect "
                f"(a fix that holds on some paths only); the list: {d.declared_at}"
            )
    return out
