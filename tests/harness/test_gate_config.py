"""The gate's own safety nets: a test that hangs fails with its name and a stack; under ``-x`` the
first failure ends the session, a property running on another worker included.

pytest-timeout (``timeout`` in pyproject.toml) turns a hang into an ordinary
failure that names the test and prints its stack at the hang, instead of a
CI job killed with no trace. Checked on a throwaway test that sleeps forever.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.order(-3)


def test_the_gate_has_a_hang_timeout(pytestconfig):
    assert float(pytestconfig.getini("timeout")) > 0, "pyproject.toml [tool.pytest.ini_options] lost its timeout"


def test_a_hanging_test_fails_with_its_name_and_a_stack(pytester):
    pytester.makepyfile(test_hang="import time\n\ndef test_sleeps_forever():\n    time.sleep(600)\n")
    result = pytester.runpytest_subprocess("-p", "timeout", "--timeout=2", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*test_sleeps_forever*", "*time.sleep(600)*", "*Timeout*", "FAILED*test_sleeps_forever*"]
    )


ENDLESS = """
import time

from hypothesis import given, settings, strategies as st

def test_fails_at_once():
    time.sleep(1)  # the property on the other worker is running by now
    assert False

@settings(max_examples=10**9, deadline=None, database=None)
@given(st.integers())
def test_a_property_of_endless_examples(x):
    time.sleep(0.01)
"""


def test_under_x_the_first_failure_stops_a_property_on_another_worker(pytester, monkeypatch):
    """Without the stop, the property would run its examples until the 60 s timeout failed it."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_endless=ENDLESS)
    result = pytester.runpytest_subprocess(
        *("-p", "tests.plugin", "-p", "timeout", "--timeout=60", "-p", "no:cacheprovider", "-p", "no:randomly"),
        *("-n", "2", "-x", "-rs"),
    )
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*stopped: test_endless.py::test_fails_at_once failed first, and -x ends the session*"]
    )
