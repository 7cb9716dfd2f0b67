"""The known-defect check: an expected failure while the defect is there, a named failure once fixed.

Runs tests/properties/test_known_defects.py in a subprocess on the two implementations of
tests/meta/known_defect_gate.py: the core with a defect its list declares (XFAIL), and the core
without it, whose list still declares it (the run fails, saying the defect is fixed). And a serving
run of the gate on each: the defect's values and the spec's both pass the run (a defect is an
alternative, never the expectation), and a session that saw only the spec's ends with the one line
"fixed: ..." (and passes once the id is dropped from the list).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.meta import broken_ops, known_defect_gate

pytestmark = pytest.mark.order(-1)

ROOT = Path(__file__).resolve().parents[2]


def _run(pytester, impl: str, *args: str, tests: str = "tests/properties/test_known_defects.py"):
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
        *args,
        str(ROOT / tests),
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


TYPICAL_RUN = "tests/properties/test_propose_loop.py::test_a_typical_serving_run_matches_reference"


def test_a_serving_run_of_the_fixed_core_passes_and_the_session_says_fixed(pytester, monkeypatch, tmp_path):
    """Not a contradicting mismatch: the run passes on the spec's values; only the session fails, once,
    naming the list; with the id dropped from the list (``--divergences``) it is green."""
    monkeypatch.chdir(ROOT)
    fixed = _run(pytester, "defect:fixed", tests=TYPICAL_RUN)
    fixed.assert_outcomes(passed=1)
    assert fixed.ret == pytest.ExitCode.TESTS_FAILED
    lines = [line for line in fixed.outlines if line.startswith("fixed: ")]
    assert lines == [
        "fixed: padded-seq-lens-not-lowered no longer present; drop it from the list (tests/meta/known_defect_gate.py:21)"
    ], fixed.outlines
    (tmp_path / "none.txt").write_text("# every divergence held to the spec\n")
    dropped = _run(pytester, "defect:fixed", "--divergences", str(tmp_path / "none.txt"), tests=TYPICAL_RUN)
    dropped.assert_outcomes(passed=1)
    assert dropped.ret == pytest.ExitCode.OK


def test_a_session_of_both_holds_each_to_its_own_list(pytester, monkeypatch):
    """The two in one session (``--impl A,B``, as an env runs the implementations of its install), each
    held to its own known defects: the fixed one's run passes and the session says it is fixed, once; the
    present one's calls follow the defect (its run fails on the host bound it also breaks, below), and they
    are its own, not counted against the fixed one: no line says "partly fixed"."""
    monkeypatch.chdir(ROOT)
    both = _run(pytester, "defect:present,defect:fixed", tests=TYPICAL_RUN)
    both.assert_outcomes(passed=1, failed=1)
    both.stdout.fnmatch_lines(["FAILED *test_a_typical_serving_run_matches_reference?defect:present?*"])
    assert "seq_len_bound" in both.stdout.str()
    said = [line for line in both.outlines if line.startswith(("fixed: ", "partly fixed: "))]
    assert said == [
        "fixed: padded-seq-lens-not-lowered no longer present; drop it from the list (tests/meta/known_defect_gate.py:21)"
    ], both.outlines


def test_a_serving_run_of_the_core_with_the_defect_follows_the_defect(pytester, monkeypatch):
    """The defect's seq_lens are accepted and counted as the defect's; nothing says fixed. (This variant
    also hands attention a host bound below its seq_lens, which the run catches: not modelled.)"""
    monkeypatch.chdir(ROOT)
    present = _run(pytester, "defect:present", tests=TYPICAL_RUN)
    assert "calls following the defect of padded-seq-lens-not-lowered" in present.stdout.str()
    assert not [line for line in present.outlines if line.startswith(("fixed: ", "partly fixed: "))]
    assert "seq_len_bound" in present.stdout.str()
