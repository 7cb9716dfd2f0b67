"""``python -m sim bisect``: the first commit of a vllm-ascend range at which the gate fails, by ``git bisect``.

Given a vllm-ascend git checkout, a good commit and a bad one, it bisects on a worktree of its own
(``git worktree add --detach`` in a temporary folder: the checkout's files, index, HEAD and
branches are never touched, and the worktree and its bisect refs go when it ends). At each commit
the gate is the test: the commit's vLLM (its ``.github/vllm-release-tag.commit``, as ``tox -e
vllm_ascend`` reads it) in an env kept per vLLM version (``Envs``), the commit installed there as
vllm-ascend's CPU jobs install it, then the test: ``--case FILE`` replays one scenario (a failure
found earlier: seconds per step), else the differential suite and the gate with ``-x`` (the fixed
cases first, so a commit that fails does so in seconds), each in a child of the env's warm
interpreter (``warm``: what no commit changes imported once, the commit's code by each step).
A commit that cannot be built, imported or paired with a vLLM the harness has a closure for is
skipped (``git bisect skip``) with the reason, never called good or bad. The endpoints are tested first: a good commit that fails or a
bad one that passes stops the bisect with one line, exit 2, as does anything else wrong with the
input.

Run it with the interpreter of ``tox -e vllm_ascend``'s env (``.tox/vllm_ascend/bin/python -m sim
bisect ...``): its packages are the closure every per-version env builds on (an overlay: that env's
site-packages on the path, the vLLM of the version and the commit installed in front of it).
"""

from __future__ import annotations

import configparser
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

from sim.bisect.warm import WarmInterpreter
from sim.impls.kit.ascend import checkout

ROOT = checkout.ROOT

# What tox -e vllm_ascend sets for its test runs (tox.ini), so a step runs the gate as the env does.
RUN_ENV = {
    "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
    "CUDA_VISIBLE_DEVICES": "",
    "TRITON_INTERPRET": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


def gate() -> list[str]:
    """What ``tox -e vllm_ascend`` runs under ``--impl vllm_ascend``: its differential suite, then the
    gate's properties as tox.ini's ``[adapter] gate`` lists them."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return ["tests/impls/vllm_ascend", *tox["adapter"]["gate"].split()]


class BisectError(SystemExit):
    """One line on stderr naming what is wrong with the input, exit status 2; nothing left behind."""

    def __init__(self, message: str):
        print(f"python -m sim bisect: error: {message}", file=sys.stderr)
        super().__init__(2)


@dataclass
class Verdict:
    """What the gate said of one commit: ``good``, ``bad`` or ``skip``, and why (the first failure, or
    what kept it from running), with the replay command a failure printed."""

    status: str
    reason: str = ""
    replay: str = ""
    seconds: float = 0.0


def git(repo: Path, *args: str, check: bool = True) -> str:
    run = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and run.returncode:
        raise RuntimeError(f"git {' '.join(args)}: {run.stderr.strip() or run.stdout.strip()}")
    return run.stdout.strip()


def commit_of(repo: Path, rev: str, role: str) -> str:
    """The full hash ``rev`` names in ``repo``, or a ``BisectError`` naming it."""
    found = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                           capture_output=True, text=True)  # fmt: skip
    if found.returncode:
        raise BisectError(f"{role} commit {rev!r} is not in the repository {repo}")
    return found.stdout.strip()


def subject(repo: Path, commit: str) -> str:
    return git(repo, "log", "-1", "--format=%s", commit)


class Envs:
    """An env per vLLM version under ``root``, reused by every bisect: a venv whose path holds, first,
    what it installs (that vLLM with ``--no-deps``, where the base env's differs, and the commit under
    test), then the base env's site-packages (``base``: the closure, torch included)."""

    def __init__(self, root: Path, base: Path | None = None):
        self.root = root
        self.base = base or Path(next(p for p in sys.path if p.endswith("site-packages")))
        self.installed: dict[Path, str] = {}  # env -> the packaging digest of the commit installed there
        self.warm: dict[Path, WarmInterpreter] = {}  # env -> its warm interpreter (started on first run)

    def run(self, python: Path, module: str, argv: list[str]) -> tuple[int, list[str]]:
        """``python -m module *argv`` as the gate's env runs it, in a child of ``python``'s warm
        interpreter; (exit status, lines of its output)."""
        if python not in self.warm:
            # bytecode outside the worktree, kept across steps: a step recompiles the files its commit
            # changed only (under the caller's prefix where one is set, as tox sets it)
            env = {"PYTHONPYCACHEPREFIX": str(self.root / "pycache"), **os.environ, **RUN_ENV, "PYTHONPATH": str(ROOT)}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            self.warm[python] = WarmInterpreter(python, env, ROOT)
        with tempfile.TemporaryDirectory(prefix="mtp-bisect-step-") as tmp:
            log = Path(tmp) / "out.log"
            code = self.warm[python].run(module, argv, log)
            return code, log.read_text(errors="replace").splitlines() if log.exists() else []

    def __enter__(self) -> Envs:
        return self

    def __exit__(self, *exc) -> None:
        """Stop the warm interpreters."""
        for warm in self.warm.values():
            warm.close()
        self.warm.clear()

    def python(self, vllm: str) -> Path:
        """The interpreter of the env for vLLM ``vllm``, made on first use."""
        env = self.root / f"vllm-{vllm}"
        python = env / "bin" / "python"
        if (env / "ready").is_file():
            return python
        shutil.rmtree(env, ignore_errors=True)
        venv.create(env, with_pip=False)
        (site,) = env.glob("lib/python*/site-packages")
        (site / "base-env.pth").write_text(f"{self.base}\n")
        have = subprocess.run(
            [str(python), "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
        )
        if have.stdout.strip() != vllm:
            self._pip(python, "--no-deps", f"vllm=={vllm}")
        (env / "ready").write_text(vllm + "\n")
        return python

    def install(self, python: Path, tree: Path) -> None:
        """The commit checked out in ``tree`` installed in ``python``'s env (editable, as vllm-ascend's CPU
        jobs do), unless the same tree with the same packaging is installed there already."""
        digest = checkout.packaging_digest(tree)
        if self.installed.get(python) == f"{tree}:{digest}":
            return
        self._pip(python, "--no-deps", "--no-build-isolation", "-e", str(tree), env=checkout.BUILD_ENV)
        # The tree on the path ahead of the base env's site-packages: pip's editable install adds a finder
        # that Python asks only after the path, where a base env built from the released wheels (tox -e
        # vllm_ascend without VLLM_ASCEND_SRC) has a vllm_ascend of its own, which every step would test.
        (site,) = python.parent.parent.glob("lib/python*/site-packages")
        (site / "0-commit.pth").write_text(f"{tree}\n")  # site reads .pth files by name: before base-env.pth
        if python in self.warm:  # its path was read at its start, before this install
            self.warm.pop(python).close()
        found = subprocess.run(
            [str(python), "-c", "import importlib.util as u; print(u.find_spec('vllm_ascend').origin)"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if not Path(found).resolve().is_relative_to(tree.resolve()):
            raise InstallError(f"the commit's vllm_ascend is not what imports: {found or 'nothing'} does")
        self.installed[python] = f"{tree}:{digest}"

    @staticmethod
    def _pip(python: Path, *args: str, env: dict | None = None) -> None:
        cmd = [str(python), "-m", "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check", *args]
        run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
        if run.returncode:
            last = (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise InstallError(f"pip install {args[-1]}: {last[0]}")


class InstallError(RuntimeError):
    """A commit (or its vLLM) could not be installed: the commit is skipped."""


def test_commit(tree: Path, envs: Envs, case: Path | None, pytest_args: list[str]) -> Verdict:
    """The gate on the commit checked out in ``tree``."""
    start = time.perf_counter()
    unpaired = checkout.unpaired_reason(tree, label="the commit")
    if unpaired:  # a fact of this commit
        return Verdict("skip", unpaired)
    vllm = checkout.paired_vllm(tree)
    try:
        python = envs.python(vllm)
        envs.install(python, tree)
    except InstallError as exc:
        return Verdict("skip", f"cannot be built: {exc}", seconds=time.perf_counter() - start)
    if case is not None:
        module, argv = "sim", ["replay", str(case), "--impl", "vllm_ascend"]
    else:
        module, argv = "pytest", ["--device", "sim", "--impl", "vllm_ascend", "-p", "no:cacheprovider", "-x", "-q",
                                  "-rf", "--hypothesis-profile", "adapter", *gate(), *pytest_args]  # fmt: skip
    code, lines = envs.run(python, module, argv)
    seconds = time.perf_counter() - start
    replays = [line.split("replay: ", 1)[1] for line in lines if "replay: python -m sim replay " in line]
    replay = replays[0] if replays else (f"python -m sim replay {case} --impl vllm_ascend" if case else "")
    if code == 0:
        return Verdict("good", seconds=seconds)
    if code == 1:
        failed = [line.split(" ", 2)[1] for line in lines if line.startswith("FAILED ")]
        first = failed[0] if failed else _last_meaningful(lines)
        return Verdict("bad", first, replay, seconds)
    return Verdict("skip", f"the gate could not run (exit {code}): {_last_meaningful(lines)}", seconds=seconds)


def _last_meaningful(lines: list[str]) -> str:
    kept = [line.strip() for line in lines if line.strip() and not line.startswith(("INFO", "WARNING", "  warn"))]
    return kept[-1] if kept else "no output"


class Worktree:
    """A detached worktree of ``repo`` at ``commit`` in a temporary folder, removed (with its bisect
    state, which lives in the worktree's own git dir) however the bisect ends."""

    def __init__(self, repo: Path, commit: str):
        self.repo, self.commit = repo, commit
        self.tmp = Path(tempfile.mkdtemp(prefix="mtp-bisect-"))
        self.path = self.tmp / "vllm-ascend"

    def __enter__(self) -> Path:
        git(self.repo, "worktree", "add", "--detach", "--quiet", str(self.path), self.commit)
        return self.path

    def __exit__(self, *exc) -> None:
        git(self.repo, "worktree", "remove", "--force", str(self.path), check=False)
        git(self.repo, "worktree", "prune", check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def add_parser(sub, formatter_class):
    """The ``bisect`` subcommand of ``python -m sim`` (``sim.cli``)."""
    bis = sub.add_parser(
        "bisect",
        help="the first commit of a vllm-ascend range at which the gate fails (git bisect on a worktree)",
        formatter_class=formatter_class,
    )
    bis.add_argument("checkout", help="a vllm-ascend git checkout (never changed: the bisect runs on a worktree)")
    bis.add_argument("--good", required=True, help="a commit the gate passes")
    bis.add_argument("--bad", required=True, help="a later commit it fails")
    bis.add_argument("--case", metavar="FILE", help="bisect on one scenario file (a failure's replay file): fastest")
    bis.add_argument(
        "--envs", metavar="DIR", help="where the env per vLLM version is kept (~/.cache/mtp-harness/bisect)"
    )
    bis.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments for the gate (without --case)")
    return bis


def _say(message: str) -> None:
    print(message, flush=True)


def bisect(repo: str, good: str, bad: str, case: str | None = None, envs_dir: str | None = None,
           pytest_args: list[str] | None = None) -> int:  # fmt: skip
    """Find the first bad commit between ``good`` and ``bad`` of the checkout ``repo``; 0 when found."""
    top = Path(repo).resolve()
    if not top.is_dir() or subprocess.run(["git", "-C", str(top), "rev-parse", "--git-dir"],
                                          capture_output=True).returncode:  # fmt: skip
        raise BisectError(f"{repo}: not a git checkout")
    case_path = Path(case).resolve() if case else None
    if case_path is not None and not case_path.is_file():
        raise BisectError(f"--case {case}: no such file")
    g, b = commit_of(top, good, "good"), commit_of(top, bad, "bad")
    if subprocess.run(["git", "-C", str(top), "merge-base", "--is-ancestor", g, b]).returncode:
        raise BisectError(f"good commit {good} ({g[:12]}) is not an ancestor of bad commit {bad} ({b[:12]})")
    count = int(git(top, "rev-list", "--count", f"{g}..{b}"))
    envs = Envs(Path(envs_dir or Path.home() / ".cache" / "mtp-harness" / "bisect").resolve())
    start = time.perf_counter()
    test = case_path.name if case_path else "the differential suite and the gate, -x"
    _say(f"bisecting {count} commits of {top} ({g[:12]}..{b[:12]}, about {math.ceil(math.log2(count + 1))} steps); "
         f"the test: {test}; envs in {envs.root}")  # fmt: skip
    verdicts: dict[str, Verdict] = {}
    with Worktree(top, b) as tree, envs:  # envs: its warm interpreters stopped however it ends
        for commit, role, want in ((g, "good", "good"), (b, "bad", "bad")):
            git(tree, "checkout", "--quiet", "--detach", commit)
            verdict = verdicts[commit] = test_commit(tree, envs, case_path, pytest_args or [])
            _say(f"  {role} {commit[:12]} {subject(tree, commit)[:60]}: {verdict.status} in {verdict.seconds:.0f} s")
            if verdict.status != want:
                why = f": {verdict.reason}" if verdict.reason else ""
                said = "cannot be tested" if verdict.status == "skip" else f"is {verdict.status}, not {want}"
                raise BisectError(f"{role} commit {commit[:12]} {said}{why}")
        out = git(tree, "bisect", "start", b, g)
        step, first = 0, None
        while first is None:
            step += 1
            head = git(tree, "rev-parse", "HEAD")
            left = _steps_left(out)
            _say(f"[step {step}, about {left} left] {head[:12]} {subject(tree, head)[:60]} "
                 f"(elapsed {time.perf_counter() - start:.0f} s)")  # fmt: skip
            verdict = verdicts[head] = test_commit(tree, envs, case_path, pytest_args or [])
            why = f": {verdict.reason}" if verdict.reason else ""
            _say(f"    {verdict.status} in {verdict.seconds:.0f} s{why}")
            run = subprocess.run(["git", "-C", str(tree), "bisect", verdict.status], capture_output=True, text=True)
            out = run.stdout
            if "is the first bad commit" in out:
                first = out.split()[0]
            elif "only skipped commits left" in out or run.returncode:
                _say(out.strip() or run.stderr.strip())
                return 1
        git(tree, "bisect", "reset", "--quiet", check=False)
    found = verdicts[first]
    _say(f"first bad commit: {first} {subject(top, first)}")
    _say(f"  first failure: {found.reason}")
    if found.replay:
        _say(f"  replay: {found.replay}")
    _say(f"  {step} steps in {time.perf_counter() - start:.0f} s")
    return 0


def _steps_left(out: str) -> str:
    """``git bisect``'s estimate ("(roughly N steps)"), or ?."""
    marker = "(roughly "
    return out.split(marker, 1)[1].split(" ", 1)[0] if marker in out else "?"
