"""The main-verified leg of ``install`` (``sim/impls/kit/ascend/vllm_source.py``).

On throwaway git trees and records, with no pip run: the vLLM tree's commit checked against the
vllm-ascend checkout's ``.github/vllm-main-verified.commit`` (a match installs, a mismatch stops
naming both commits with exit 2 before anything is installed, ``VLLM_SRC_ANY_COMMIT=1`` overrides),
an unknown release tag still refused as before, a source-built vLLM accepted only when the record
names the vLLM installed now, and its report-header line.

Each check is a ``check_*`` function of ``(monkeypatch, capsys, tmp_path)``; the tests here run
them on the real recipe, and tests/meta/test_vllm_source_caught.py runs each on a broken variant
(tests/meta/broken_vllm_source.py) and sees it fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.impls.kit.ascend import checkout, install, vllm_source

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "init.defaultBranch=main"]
SOURCE_VERSION = "0.27.2.dev1+g0123abc.empty"  # what setuptools-scm and VLLM_TARGET_DEVICE=empty make of a main commit
IMPORTED_VERSION = "0.27.2.dev1+g0123abc"  # vllm.__version__ of that install (its _version.py)


def _commit(tree: Path, message: str) -> str:
    subprocess.run([*GIT, "-C", str(tree), "add", "-A"], check=True, capture_output=True)
    subprocess.run([*GIT, "-C", str(tree), "commit", "-q", "--allow-empty", "-m", message], check=True)
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return rev.stdout.strip()


def _vllm_tree(tmp_path: Path) -> tuple[Path, str, str]:
    """A git tree shaped like a vLLM checkout, two commits: (path, older commit, HEAD)."""
    tree = tmp_path / "vllm"
    (tree / "vllm").mkdir(parents=True)
    (tree / "setup.py").write_text("raise SystemExit('not to be built by these tests')\n")
    subprocess.run([*GIT, "init", "-q", str(tree)], check=True)
    older = _commit(tree, "release")
    return tree, older, _commit(tree, "main")


def _ascend(tmp_path: Path, main_verified: str, tag: str = "v0.27.1") -> Path:
    """A directory with a vllm-ascend checkout's two ``.github/vllm-*.commit`` files."""
    src = tmp_path / "vllm-ascend"
    (src / ".github").mkdir(parents=True, exist_ok=True)
    (src / checkout.TAG_FILE).write_text(tag + "\n")
    (src / vllm_source.MAIN_VERIFIED_FILE).write_text(main_verified + "\n")
    return src


def _install(monkeypatch, capsys, ascend: Path | None, tree: Path, any_commit: str | None = None):
    """``install`` as tox runs it, pip and the vLLM build recorded instead of run:
    (exit status, stderr lines, pip calls, the Source handed to the build or None)."""
    pips, built = [], []
    monkeypatch.setattr(install, "_pip", lambda *args, env=None: pips.append((args, env)))
    monkeypatch.setattr(vllm_source, "install", lambda source, pip, prefix=sys.prefix: built.append(source))
    monkeypatch.setattr(vllm_source, "forget", lambda prefix=sys.prefix: None)
    if ascend is None:
        monkeypatch.delenv(checkout.SRC_VAR, raising=False)
    else:
        monkeypatch.setenv(checkout.SRC_VAR, str(ascend))
    monkeypatch.setenv(vllm_source.SRC_VAR, str(tree))
    if any_commit is None:
        monkeypatch.delenv(vllm_source.ANY_COMMIT_VAR, raising=False)
    else:
        monkeypatch.setenv(vllm_source.ANY_COMMIT_VAR, any_commit)
    code = 0
    try:
        install.main()
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err.splitlines(), pips, (built[0] if built else None)


def _assert_installs(outcome, tree: Path, commit: str, verified: bool) -> None:
    code, err, pips, built = outcome
    assert (code, err) == (0, []), err
    assert built is not None and (built.path, built.commit, built.closure) == (str(tree.resolve()), commit, "0.27.1")
    assert built.verified is verified
    closure, ascend = pips  # the closure with vLLM's build tools, then the checkout as vllm-ascend's CPU jobs
    assert closure[0] == ("-r", str(checkout.ROOT / checkout.CLOSURES["0.27.1"]), "-r", str(vllm_source.BUILD_TOOLS))
    assert ascend[0][-2] == "-e" and ascend[1] == checkout.BUILD_ENV


def _assert_stops(outcome, *named: str) -> None:
    code, err, pips, built = outcome
    assert code == 2 and len(err) == 1, err
    assert all(word in err[0] for word in named), err[0]
    assert (pips, built) == ([], None), "nothing is installed before the check"


# --- the commit check -----------------------------------------------------------------------------


def check_main_verified_commit_installs(monkeypatch, capsys, tmp_path, digits: int = 40) -> None:
    tree, _, head = _vllm_tree(tmp_path)
    outcome = _install(monkeypatch, capsys, _ascend(tmp_path, head[:digits]), tree)
    _assert_installs(outcome, tree, head, verified=True)


def check_main_verified_prefix_installs(monkeypatch, capsys, tmp_path) -> None:
    """The file may hold 7 to 40 digits (vllm-ascend's pr_test.yaml accepts them)."""
    check_main_verified_commit_installs(monkeypatch, capsys, tmp_path, digits=7)


def check_another_commit_stops_naming_both(monkeypatch, capsys, tmp_path) -> None:
    tree, older, head = _vllm_tree(tmp_path)
    outcome = _install(monkeypatch, capsys, _ascend(tmp_path, older), tree)
    _assert_stops(outcome, head, older, vllm_source.MAIN_VERIFIED_FILE, vllm_source.ANY_COMMIT_VAR)


def check_override_installs_another_commit(monkeypatch, capsys, tmp_path) -> None:
    tree, older, head = _vllm_tree(tmp_path)
    _assert_installs(_install(monkeypatch, capsys, _ascend(tmp_path, older), tree, "1"), tree, head, verified=False)


def check_override_value_other_than_1_stops(monkeypatch, capsys, tmp_path, value: str = "yes") -> None:
    tree, older, _ = _vllm_tree(tmp_path)
    outcome = _install(monkeypatch, capsys, _ascend(tmp_path, older), tree, value)
    _assert_stops(outcome, f"{vllm_source.ANY_COMMIT_VAR}={value!r}")


def check_unknown_release_tag_stays_the_one_line_error(monkeypatch, capsys, tmp_path) -> None:
    tree, _, head = _vllm_tree(tmp_path)
    outcome = _install(monkeypatch, capsys, _ascend(tmp_path, head, tag="v0.28.0"), tree)
    _assert_stops(
        outcome, "pairs with vLLM 'v0.28.0'", f"closures for vLLM {', '.join(sorted(checkout.CLOSURES))} only"
    )


@pytest.mark.parametrize("digits", [40, 7], ids=["full-commit", "prefix"])
def test_a_tree_at_the_main_verified_commit_installs(monkeypatch, capsys, tmp_path, digits):
    check_main_verified_commit_installs(monkeypatch, capsys, tmp_path, digits)


def test_a_tree_at_another_commit_stops_naming_both(monkeypatch, capsys, tmp_path):
    check_another_commit_stops_naming_both(monkeypatch, capsys, tmp_path)


def test_the_override_installs_another_commit_as_not_verified(monkeypatch, capsys, tmp_path):
    check_override_installs_another_commit(monkeypatch, capsys, tmp_path)


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_an_override_value_other_than_1_stops_naming_it(monkeypatch, capsys, tmp_path, value):
    check_override_value_other_than_1_stops(monkeypatch, capsys, tmp_path, value)


def test_an_unknown_release_tag_stays_the_one_line_error(monkeypatch, capsys, tmp_path):
    check_unknown_release_tag_stays_the_one_line_error(monkeypatch, capsys, tmp_path)


@pytest.mark.parametrize(
    "bad, named",
    [
        ("main", ["'main'", "7 to 40"]),  # a branch name, not a commit
        ("CDC4824A21EAA986D4D1FEE90A7E6465C9F706E6", ["'CDC4824A"]),  # pr_test.yaml's pattern is lowercase
    ],
)
def test_a_main_verified_file_that_is_no_commit_stops_naming_it(monkeypatch, capsys, tmp_path, bad, named):
    tree, _, _ = _vllm_tree(tmp_path)
    _assert_stops(_install(monkeypatch, capsys, _ascend(tmp_path, bad), tree), vllm_source.MAIN_VERIFIED_FILE, *named)


def test_a_tree_that_is_no_git_top_stops(monkeypatch, capsys, tmp_path):
    _, older, _ = _vllm_tree(tmp_path)
    plain = tmp_path / "vllm" / "vllm"  # inside the git tree, not its top: like an sdist laid out in another repository
    (plain / "setup.py").write_text("")
    (plain / "vllm").mkdir()
    _assert_stops(_install(monkeypatch, capsys, _ascend(tmp_path, older), plain), "not the top of a git tree")


def test_vllm_src_without_a_vllm_ascend_checkout_stops(monkeypatch, capsys, tmp_path):
    tree, _, _ = _vllm_tree(tmp_path)
    _assert_stops(_install(monkeypatch, capsys, None, tree), f"needs {checkout.SRC_VAR}")


# --- what importing accepts, and the header line --------------------------------------------------


def _installed(monkeypatch, tmp_path: Path, **changes) -> tuple[Path, Path, str]:
    """An env prefix with this recipe's record, and a vLLM distribution on sys.path: an editable
    install of a vLLM tree at ``SOURCE_VERSION`` (the ``.dist-info`` pip leaves). ``changes`` alter
    the record (a stale one). Returns (prefix, tree, its HEAD)."""
    tree, _, head = _vllm_tree(tmp_path)
    site = tmp_path / "site"
    info = site / f"vllm-{SOURCE_VERSION}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {SOURCE_VERSION}\n")
    (info / "direct_url.json").write_text(json.dumps({"url": tree.resolve().as_uri(), "dir_info": {"editable": True}}))
    monkeypatch.syspath_prepend(str(site))
    prefix = tmp_path / "env"
    prefix.mkdir()
    fields = {"path": str(tree.resolve()), "commit": head, "main_verified": head, "closure": "0.27.1"}
    record = {**fields, "version": SOURCE_VERSION, **changes}
    vllm_source.record_path(str(prefix)).write_text(json.dumps(record))
    return prefix, tree, head


def check_header_names_the_source_commit_and_closure(monkeypatch, capsys, tmp_path) -> None:
    prefix, tree, head = _installed(monkeypatch, tmp_path)
    got = vllm_source.describe(IMPORTED_VERSION, prefix=str(prefix))
    want = f"vLLM {IMPORTED_VERSION} (source {tree.resolve()} at {head[:12]}, main-verified; closure of v0.27.1)"
    assert got == want


def check_header_says_an_overridden_commit_is_not_verified(monkeypatch, capsys, tmp_path) -> None:
    prefix, _, head = _installed(monkeypatch, tmp_path, main_verified="cdc4824a21eaa986d4d1fee90a7e6465c9f706e6")
    got = vllm_source.describe(IMPORTED_VERSION, prefix=str(prefix))
    assert got.endswith(f"at {head[:12]}, not the main-verified cdc4824a21ea; closure of v0.27.1)"), got


def check_recorded_source_install_is_supported(monkeypatch, capsys, tmp_path) -> None:
    prefix, _, _ = _installed(monkeypatch, tmp_path)
    assert vllm_source.supported(IMPORTED_VERSION, prefix=str(prefix))
    assert vllm_source.supported("0.27.1", prefix=str(tmp_path / "no-env")), "a release with a closure, no record"


STALE = {
    "another vLLM installed since": {"version": "0.27.1"},
    "another tree": {"path": "/elsewhere/vllm"},
    "a closure the harness lacks": {"closure": "0.28.0"},
}


def check_unknown_version_refused(monkeypatch, capsys, tmp_path, stale: str = "another vLLM installed since") -> None:
    """No record, or one that does not name the vLLM installed now: refused like any unknown version."""
    assert not vllm_source.supported("0.28.0", prefix=str(tmp_path / "no-env")), "no record"
    prefix, _, _ = _installed(monkeypatch, tmp_path, **STALE[stale])
    assert not vllm_source.supported(IMPORTED_VERSION, prefix=str(prefix)), f"a stale record: {stale}"
    assert vllm_source.recorded(str(prefix)) is None


def test_the_header_names_a_source_built_vllm_its_commit_and_closure(monkeypatch, capsys, tmp_path):
    check_header_names_the_source_commit_and_closure(monkeypatch, capsys, tmp_path)


def test_the_header_says_an_overridden_commit_is_not_the_main_verified_one(monkeypatch, capsys, tmp_path):
    check_header_says_an_overridden_commit_is_not_verified(monkeypatch, capsys, tmp_path)


def test_a_release_header_is_unchanged(tmp_path):
    assert vllm_source.describe("0.27.1", prefix=str(tmp_path)) == "vLLM 0.27.1"


def test_a_recorded_source_install_is_supported(monkeypatch, capsys, tmp_path):
    check_recorded_source_install_is_supported(monkeypatch, capsys, tmp_path)


@pytest.mark.parametrize("stale", list(STALE))
def test_an_unknown_version_is_refused_without_a_matching_record(monkeypatch, capsys, tmp_path, stale):
    check_unknown_version_refused(monkeypatch, capsys, tmp_path, stale)
