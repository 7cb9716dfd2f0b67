"""The known-defect check: an expected failure while the defect is there, a named failure once fixed.

Runs tests/properties/test_known_defects.py in a subprocess on the two implementations of
tests/meta/known_defect_gate.py: the core with a defect its list declares (XFAIL), and the core
without it, whose list still declares it (the run fails, saying the defect is fixed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.meta import broken_ops, known_defect_gate

pytestmark = pytest.mark.order(-1)

ROOT = Path(__file__).resolve().parents[2]


def _run(pytester, impl: str):
    return pytester.runpytest_subprocess(
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-p",
        "tests.meta.known_defect_gate",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--impl",
        impl,
        "-rxXf",
        str(ROOT / "tests/properties/test_known_defects.py"),
    )


@pytest.mark.parametrize("variant", [broken_ops.PaddedSeqLensNotLowered], ids=lambda v: v.__name__)
def test_a_known_defect_that_is_present_is_an_expected_failure(pytester, monkeypatch, variant):
    monkeypatch.chdir(ROOT)
    assert type(known_defect_gate.present().ops) is variant
    result = _run(pytester, "defect:present")
    result.assert_outcomes(xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*padded-seq-lens-not-lowered*known defect padded-seq-lens-not-lowered*"])


def test_a_known_defect_that_was_fixed_fails_the_run_saying_so(pytester, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = _run(pytester, "defect:fixed")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*fixed: padded-seq-lens-not-lowered no longer present; drop it from the list*"])
