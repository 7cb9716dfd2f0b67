"""The gate's own safety nets: a test that hangs fails with its name and a stack.

pytest-timeout (``timeout`` in pyproject.toml) turns a hang into an ordinary
failure that names the test and prints its stack at the hang, instead of a
CI job killed with no trace. Checked on a throwaway test that sleeps forever.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.order(0)


def test_the_gate_has_a_hang_timeout(pytestconfig):
    assert float(pytestconfig.getini("timeout")) > 0, "pyproject.toml [tool.pytest.ini_options] lost its timeout"


def test_a_hanging_test_fails_with_its_name_and_a_stack(pytester):
    pytester.makepyfile(test_hang="import time\n\ndef test_sleeps_forever():\n    time.sleep(600)\n")
    result = pytester.runpytest_subprocess("-p", "timeout", "--timeout=2", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*test_sleeps_forever*", "*time.sleep(600)*", "*Timeout*", "FAILED*test_sleeps_forever*"]
    )
