"""``python -m sim bisect`` on a synthetic history of the vllm-ascend under test (``history``): it names
the commit that broke the step update, skips (never judges) the commits that cannot be imported or
paired with a vLLM, and refuses bad input in one line with exit 2. The user's checkout is never touched: clean ``git
status``, the same HEAD, no worktree or bisect ref left behind.

The history is built from the sources of the vllm-ascend the env installed (``VLLM_ASCEND_SRC``, as
``.ci/run`` sets it to the released 0.23.0 sdist laid out as a checkout), so each step installs and runs
real vllm-ascend code; the test is one replay file, the fastest a bisect has.

They test the harness's own tool, not the vllm-ascend under test, and cost about a minute of one
worker: they run where ``MTP_SELF_TEST`` is set (``.ci/run`` sets it), and a vllm-ascend pull
request's gate skips them, naming why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim import bisect as bisecting
from sim.bisect.warm import WarmInterpreter
from sim.impls.kit.ascend import checkout
from sim.serving.scenario import default_scenario
from tests.impls.suites import SELF_TEST
from tests.impls.vllm_ascend import history

pytestmark = SELF_TEST  # python -m sim bisect's own tests

COMMITS, BROKEN_AT = 7, 6
# git bisect's first choice in this range is commit 3, which pairs with no vLLM the harness has: skipped
# without a run. Its next choice, commit 4, cannot be imported: skipped with the cause. Then commits 5
# (good) and 6 (bad): every kind of verdict in five runs of the gate, the endpoints' included.
UNPAIRED_AT, UNIMPORTABLE_AT = 3, 4


def _source() -> Path:
    src = os.environ.get(checkout.SRC_VAR)
    if not src:
        pytest.fail(
            f"{checkout.SRC_VAR} is unset: the bisect's history is built from a vllm-ascend source tree "
            f"(.ci/run sets it; or: python sim/impls/kit/ascend/checkout.py released-source DEST)"
        )
    return Path(src)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, list[str]]:
    dest = tmp_path_factory.mktemp("history") / "vllm-ascend"
    return dest, history.build(_source(), dest, COMMITS, BROKEN_AT, UNIMPORTABLE_AT, UNPAIRED_AT)


@pytest.fixture(scope="module")
def case(tmp_path_factory) -> Path:
    """A serving run that a step update advancing ``seq_lens`` by two fails (seen in the test below)."""
    return default_scenario(0, 6, num_spec_tokens=2).save(tmp_path_factory.mktemp("case") / "case.json")


@pytest.fixture(scope="module")
def envs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envs")


def _state(repo: Path) -> tuple[str, str, str, str]:
    """What a bisect must leave as it found it: status, HEAD, worktrees, bisect refs."""

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout

    return (
        git("status", "--porcelain"),
        git("rev-parse", "HEAD"),
        git("worktree", "list"),
        git("for-each-ref", "refs/bisect"),
    )


# The session's longest test (about a minute of one worker): started with the paths' first cases, so it runs
# beside the rest of the session, not alone at its end (skipped in a pull request's verdict, so no first
# failure waits on it there)
@pytest.mark.order(1)
def test_bisect_names_the_commit_that_broke_the_step_update(repo, case, envs, capsys):
    path, hashes = repo
    before = _state(path)
    assert bisecting.bisect(str(path), hashes[0], hashes[-1], case=str(case), envs_dir=str(envs)) == 0
    out = capsys.readouterr().out
    assert f"first bad commit: {hashes[BROKEN_AT]} change {BROKEN_AT}: the step update advances seq_lens by two" in out
    assert f"replay: python -m sim replay {case} --impl vllm_ascend" in out
    verdicts = _verdicts(out, hashes)
    assert verdicts[UNPAIRED_AT].startswith("skip in 0 s: the commit pairs with vLLM 'v9.9.9'"), out
    unimportable = verdicts[UNIMPORTABLE_AT]
    assert "the gate could not run (exit 2)" in unimportable and "SyntaxError" in unimportable, out
    assert sorted(verdicts) == [UNPAIRED_AT, UNIMPORTABLE_AT, BROKEN_AT - 1, BROKEN_AT], out
    for n, said in verdicts.items():
        want = "skip" if n in (UNIMPORTABLE_AT, UNPAIRED_AT) else "bad" if n >= BROKEN_AT else "good"
        assert said.split()[0] == want, (n, said)
    assert _state(path) == before


def _verdicts(out: str, hashes: list[str]) -> dict[int, str]:
    """Commit number -> what the bisect said of it ("good in 7 s", "skip in 0 s: why", ...)."""
    number = {h[:12]: n for n, h in enumerate(hashes)}
    lines = out.splitlines()
    return {
        number[line.split("] ", 1)[1].split()[0]]: lines[i + 1].strip()
        for i, line in enumerate(lines)
        if line.startswith("[step ")
    }


@pytest.mark.parametrize(
    ("good", "bad", "why"),
    [
        (BROKEN_AT, COMMITS, "good commit {g12} is bad, not good: the replay failed"),
        (0, BROKEN_AT - 1, "bad commit {b12} is good, not bad"),
        (UNPAIRED_AT, COMMITS, "good commit {g12} cannot be tested: the commit pairs with vLLM 'v9.9.9'"),
    ],
    ids=["good-fails", "bad-passes", "good-untestable"],
)
def test_endpoints_that_contradict_the_test_stop_with_one_line(repo, case, envs, capsys, monkeypatch, good, bad, why):
    """The endpoints' checks, with each commit judged as the bisect above judged it (before the range's
    regression good, from it on bad; the unpaired commit by the real test, which reads its tag file
    only): the gate's run itself is covered there, and would cost a minute here."""
    path, hashes = repo
    real = bisecting.test_commit

    def as_judged_above(tree, envs_, case_, args):
        n = hashes.index(bisecting.git(tree, "rev-parse", "HEAD"))
        if n == UNPAIRED_AT:
            return real(tree, envs_, case_, args)
        return bisecting.Verdict("bad", "the replay failed") if n >= BROKEN_AT else bisecting.Verdict("good")

    monkeypatch.setattr(bisecting, "test_commit", as_judged_above)
    before = _state(path)
    with pytest.raises(SystemExit) as stopped:
        bisecting.bisect(str(path), hashes[good], hashes[bad], case=str(case), envs_dir=str(envs))
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert why.format(g12=hashes[good][:12], b12=hashes[bad][:12]) in err[0]
    assert _state(path) == before


def test_bad_input_is_one_line_and_exit_2(repo, case, tmp_path, capsys):
    path, hashes = repo
    before = _state(path)
    wrong = [
        ((str(tmp_path), hashes[0], hashes[-1]), f"{tmp_path}: not a git checkout"),
        ((str(path), "f" * 40, hashes[-1]), f"good commit {'f' * 40!r} is not in the repository {path}"),
        ((str(path), hashes[0], "no-such-branch"), f"bad commit 'no-such-branch' is not in the repository {path}"),
        ((str(path), hashes[-1], hashes[0]), f"is not an ancestor of bad commit {hashes[0]}"),
    ]
    for args, message in wrong:
        with pytest.raises(SystemExit) as stopped:
            bisecting.bisect(*args, case=str(case), envs_dir=str(tmp_path / "envs"))
        assert stopped.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (message, err)
    assert _state(path) == before


def test_a_warm_interpreter_runs_each_command_as_python_m_would(tmp_path):
    """Each command in its own child of the warm interpreter (``sim.bisect.warm``), its output to its log: an
    uncaught exception is exit 1 with its traceback, ``sys.exit("why")`` exit 1 with the why, an
    exit status passes through, a temporary folder is removed at the child's exit as at an
    interpreter's, and the server goes on serving after each; a server whose preload imported vLLM
    serves nothing."""
    (tmp_path / "boom.py").write_text("import sys\nprint('argv', sys.argv[1:])\nraise RuntimeError('boom')\n")
    (tmp_path / "leave.py").write_text("import sys\nsys.exit(sys.argv[1] if sys.argv[1:] else 3)\n")
    (tmp_path / "keeper.py").write_text("import tempfile\nKEPT = tempfile.TemporaryDirectory()\n")  # held by a module
    (tmp_path / "scratch.py").write_text("import keeper\nprint(keeper.KEPT.name)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{bisecting.ROOT}"}
    warm = WarmInterpreter(Path(sys.executable), env, tmp_path, preload=())
    log = tmp_path / "out.log"
    try:
        assert warm.run("boom", ["a", "b"], log) == 1
        out = log.read_text()
        assert "argv ['a', 'b']" in out and "RuntimeError: boom" in out, out
        assert warm.run("leave", ["the reason"], log) == 1 and log.read_text() == "the reason\n"
        assert warm.run("leave", [], log) == 3
        server = warm.proc.pid
        assert warm.run("platform", [], log) == 0 and log.read_text().strip()
        assert warm.run("scratch", [], log) == 0  # a folder kept until its interpreter exits, as sim's scratch
        assert not Path(log.read_text().strip()).exists()  # gone when the child ends
        assert warm.proc.pid == server  # one server for all five
    finally:
        warm.close()
    (tmp_path / "vllm").mkdir()  # a vllm (this one empty) imported before the fork: the server refuses to serve
    (tmp_path / "vllm" / "__init__.py").write_text("")
    early = WarmInterpreter(Path(sys.executable), env, tmp_path, preload=("vllm",))
    try:
        assert early.run("platform", [], log) == 2
        assert log.read_text() == f"the warm interpreter {sys.executable} exited with 1\n"
    finally:
        early.close()
