"""The time-to-failure benchmark counts a failure as a catch only where the gate failed it: a break
whose own code raises (``tests/impls/*/*breaks.py``, ``tests/meta/broken_*.py``) is no catch
(``benchmarks.time_to_failure.raised_in_a_break``), as a rejection break reading an all-greedy batch's
temperatures once was."""

from __future__ import annotations

import pytest

from benchmarks.time_to_failure import raised_in_a_break

pytestmark = pytest.mark.order(-3)

BREAK = """
def broken(rows):
    return [r.tolist() for r in rows]  # None has no tolist: the break's own crash
"""

TESTS = """
import importlib.util

spec = importlib.util.spec_from_file_location("demo_breaks", "tests/impls/demo/demo_breaks.py")
breaks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(breaks)
broken = breaks.broken


def test_the_break_raises():
    broken([None])


def test_the_gate_catches():
    assert broken([]) == ["a mismatch"]
"""


@pytest.fixture
def output(pytester) -> str:
    (pytester.path / "tests/impls/demo").mkdir(parents=True)
    (pytester.path / "tests/impls/demo/demo_breaks.py").write_text(BREAK)
    pytester.makepyfile(test_gate=TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-rf")
    result.assert_outcomes(failed=2)
    return "\n".join(result.outlines)


def test_a_failure_raised_in_the_break_is_no_catch(output):
    assert raised_in_a_break(output, "test_gate.py::test_the_break_raises") == "tests/impls/demo/demo_breaks.py"


def test_a_failure_of_the_gate_is_a_catch(output):
    assert raised_in_a_break(output, "test_gate.py::test_the_gate_catches") is None
