"""Under pytest-xdist only the workers load the implementation under test (``tests/loaded_by_workers.py``):
the report still says what is under test and which divergences are in force, the session's verdict still
reads its known defects, and one that cannot be loaded still ends the session with one line and exit 4.
Several in one session (``--impl a,b``, the implementations of one install) load the same way, each test
running its own, and one the checkout has not is one line beside the others' run."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.order(-3)

# Registers implementations whose factory records which process loaded it (xdist's PYTEST_XDIST_WORKER).
RECORDED = """
import os

import sim.impls
from sim.impls import ImplementationUnavailable, NotInThisCheckout
from tests.meta import known_defect_gate


def _record():
    with open(os.environ["LOADS"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")


def loads():
    _record()
    return known_defect_gate.present()


def fails():
    _record()
    raise ImplementationUnavailable("recorded:fails", "its upstream cannot be imported here")


def absent():
    _record()
    raise NotInThisCheckout("recorded:absent", "its branch has none that runs")


def other():
    _record()
    return known_defect_gate.fixed()


sim.impls.BUILTIN["recorded:loads"] = "recorded_impl:loads"
sim.impls.BUILTIN["recorded:fails"] = "recorded_impl:fails"
sim.impls.BUILTIN["recorded:absent"] = "recorded_impl:absent"
sim.impls.BUILTIN["recorded:other"] = "recorded_impl:other"
"""

USES_IT = """
def test_the_worker_has_it(impl):
    assert impl.name == "defect:present" and impl.proposer_cls is not None
"""


def _recording(pytester, monkeypatch) -> None:
    """The session below records which of its processes load the implementation: not this test's own
    xdist worker, whose name its environment would hand down to the session's controller."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{pytester.path}")
    monkeypatch.setenv("LOADS", str(pytester.path / "loads.txt"))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


def _run(pytester, monkeypatch, *args: str, tests: str = USES_IT):
    """A session of the test module ``tests`` with ``args`` (one worker, ``-n 1``, unless they say otherwise:
    a worker's start-up is most of such a session), and which processes loaded the implementation, one
    line each."""
    _recording(pytester, monkeypatch)
    pytester.makepyfile(recorded_impl=RECORDED, test_session=tests)
    result = pytester.runpytest_subprocess(
        *("-p", "tests.plugin", "-p", "recorded_impl", "-p", "no:cacheprovider", "-p", "no:randomly"),
        *(args if "-n" in args or "--dist" in args else ("-n", "1", *args)),
        "test_session.py",
    )
    loads = (pytester.path / "loads.txt").read_text().split() if (pytester.path / "loads.txt").exists() else []
    return result, loads


def test_only_the_workers_load_it_and_the_report_still_says_what_is_under_test(pytester, monkeypatch):
    """Each worker loads it (two here), the controller never."""
    listed = pytester.path / "divergences.txt"
    listed.write_text("padded-seq-lens-not-lowered\nno-such-divergence\n")
    result, loads = _run(pytester, monkeypatch, "-n", "2", "--impl", "recorded:loads", "--divergences", str(listed))
    result.assert_outcomes(passed=1)
    assert sorted(loads) == ["gw0", "gw1"], loads
    result.stdout.fnmatch_lines(
        [
            "*implementation under test: recorded:loads, loaded by the workers*",
            "created: 2/2 workers*",
            "implementation under test: defect:present",
            "divergences in force (1): padded-seq-lens-not-lowered (defect)",
            f"--divergences {listed}: 'no-such-divergence' matches no divergence of defect:present",
        ]
    )


SPEC_ONLY = """
from sim.serving.checker import SPEC
from tests.checks.e2e_checks import TALLY, followed_key


def test_follows_the_spec():
    TALLY[followed_key("padded-seq-lens-not-lowered", SPEC)] += 1
"""


def test_the_verdict_reads_the_known_defects_the_workers_loaded(pytester, monkeypatch):
    """``SPEC_ONLY`` follows the defect's spec only (it records the spec's tally): the controller, which
    never loaded the implementation, still finds the defect fixed and fails the session."""
    result, loads = _run(pytester, monkeypatch, "--impl", "recorded:loads", tests=SPEC_ONLY)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*fixed: padded-seq-lens-not-lowered no longer present; drop it from the list*"])
    assert "controller" not in loads and loads, loads


def test_one_that_cannot_be_loaded_ends_the_session_with_one_line_and_exit_4(pytester, monkeypatch):
    result, loads = _run(pytester, monkeypatch, "--impl", "recorded:fails")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "implementation 'recorded:fails' is unavailable: its upstream cannot be imported here" in out
    assert "Traceback" not in out, out
    result.stdout.fnmatch_lines(["*no tests ran*"])
    assert "controller" not in loads and loads, loads


@pytest.mark.parametrize("workers", ["1", "0"])
def test_one_the_checkout_has_not_ends_the_session_with_one_line_and_exit_0(pytester, monkeypatch, workers):
    """A checkout without the implementation, as a measured fact of its branch (``NotInThisCheckout``): the
    session says so in one line and runs nothing, and that is no failure (exit 0), with workers or without."""
    result, loads = _run(pytester, monkeypatch, "-n", workers, "--impl", "recorded:absent")
    assert result.ret == pytest.ExitCode.OK
    out = result.stdout.str() + result.stderr.str()
    assert "implementation 'recorded:absent' is not in this checkout: its branch has none that runs" in out
    assert "Traceback" not in out and "passed" not in out, out
    assert loads and ("controller" not in loads) == (workers != "0"), loads


CHANGES = """
import os

import pytest

from tests.impls.fixes import session_plugin


def apply(name, monkeypatch):
    if name != "known":
        raise pytest.UsageError(f"CHANGE={name!r}: not a changed proposer; known: known")
    with open(os.environ["LOADS"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")


pytest_configure = session_plugin("CHANGE", apply)
"""


@pytest.mark.parametrize("change", ["known", "unknown"])
def test_a_session_plugin_changes_the_workers_code_and_a_refused_change_is_one_line(pytester, monkeypatch, change):
    monkeypatch.setenv("CHANGE", change)
    pytester.makepyfile(changes=CHANGES)
    result, loads = _run(pytester, monkeypatch, "--impl", "recorded:loads", "-p", "changes")
    if change == "known":
        result.assert_outcomes(passed=1)
        assert loads == ["gw0", "gw0"], loads  # the implementation and the change
        return
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "CHANGE='unknown': not a changed proposer; known: known" in result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    "args", [["-n", "0"], ["--dist", "load"], ["-n", "2", "--collect-only"]], ids=["n0", "dist-alone", "collect-only"]
)
def test_a_session_xdist_runs_in_process_loads_it_in_process(pytester, monkeypatch, args):
    """xdist distributes only with workers to run on and not for ``--collect-only``: the process loads it."""
    result, loads = _run(pytester, monkeypatch, *args, "--impl", "recorded:loads")
    assert result.ret == pytest.ExitCode.OK
    assert loads == ["controller"], loads
    result.stdout.fnmatch_lines(["*implementation under test: defect:present*"])


EACH_ITS_OWN = """
NAMES = {"recorded:loads": "defect:present", "recorded:other": "defect:fixed"}


def test_each_runs_its_own(impl, request):
    assert impl.name == NAMES[request.node.callspec.params["impl"]]
"""


def test_several_in_one_session_run_each_test_once_per_implementation(pytester, monkeypatch):
    """``--impl A,B``: the implementations of one install in one session. A test that takes ``impl`` runs
    once per implementation, its id first; the worker loads both, the controller neither; the report
    names both and what is in force of each."""
    result, loads = _run(pytester, monkeypatch, "-v", "--impl", "recorded:loads,recorded:other", tests=EACH_ITS_OWN)
    result.assert_outcomes(passed=2)
    assert loads == ["gw0", "gw0"], loads
    result.stdout.fnmatch_lines(
        [
            "implementation under test: defect:present; defect:fixed",
            "recorded:loads: divergences in force (1): padded-seq-lens-not-lowered (defect)",
            "recorded:other: divergences in force (1): padded-seq-lens-not-lowered (defect)",
        ]
    )
    result.stdout.fnmatch_lines_random(
        ["*PASSED*test_each_runs_its_own?recorded:loads?*", "*PASSED*test_each_runs_its_own?recorded:other?*"]
    )


def test_one_of_several_the_checkout_has_not_is_said_and_the_others_run(pytester, monkeypatch):
    """A checkout without one of the session's implementations (a release branch without an MRV2
    speculator that runs): one line says so, the others run, and that is no failure."""
    result, _ = _run(pytester, monkeypatch, "--impl", "recorded:loads,recorded:absent")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*not run: implementation 'recorded:absent' is not in this checkout: its branch has none that runs*"]
    )


def test_an_impl_that_names_none_is_refused_naming_it(pytester, monkeypatch):
    result, loads = _run(pytester, monkeypatch, "--impl", " , ")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--impl ' , ': names no implementation" in result.stdout.str() + result.stderr.str()
    assert not loads


def test_a_divergence_list_for_several_is_refused_naming_them(pytester, monkeypatch):
    """``--divergences`` is one implementation's list: with several, the session stops at once saying so."""
    listed = pytester.path / "divergences.txt"
    listed.write_text("padded-seq-lens-not-lowered\n")
    result, loads = _run(pytester, monkeypatch, "--impl", "recorded:loads,recorded:other", "--divergences", str(listed))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert (
        f"--divergences {listed}: one implementation's list, and --impl names 2 (recorded:loads,recorded:other)" in out
    )
    assert "Traceback" not in out and not loads, out
