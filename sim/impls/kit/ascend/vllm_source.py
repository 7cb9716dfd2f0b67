"""The main-verified leg: vLLM built from a source checkout, under a vllm-ascend checkout.

vllm-ascend's ``pr_test.yaml`` tests each pull request twice: against the vLLM release
its ``.github/vllm-release-tag.commit`` names and against the vLLM main commit its
``.github/vllm-main-verified.commit`` names, the latter checked out with
``actions/checkout`` and installed from source with ``VLLM_TARGET_DEVICE=empty``
(``_selected_tests.yaml``, ``_selected_tests_upstream.yaml``). With
``VLLM_SRC=<vLLM source checkout>`` beside ``VLLM_ASCEND_SRC``, ``checkout install``
does the second:

- ``check``: the source tree's ``git rev-parse HEAD`` must be the commit the vllm-ascend
  checkout's ``vllm-main-verified.commit`` names (the file may hold a prefix of 7 to 40
  hex digits, as ``pr_test.yaml`` accepts); a mismatch is one line naming both commits,
  exit 2, before anything is installed, unless ``VLLM_SRC_ANY_COMMIT=1``;
- ``install``: ``VLLM_TARGET_DEVICE=empty pip install --no-deps --no-build-isolation -e
  <tree>`` (no kernels; setuptools-scm versions it ``0.27.2.devN+gHASH.empty``, and
  ``vllm.__version__`` reads ``0.27.2.devN+gHASH``), on the pinned closure of the release
  the tag file names. The main-verified commit is newer than that release: the closure is
  the release's, not one resolved for that commit, so a main commit that needs a newer
  dependency fails at import, with the cause. vllm-ascend's own jobs run ``uv pip install
  [-e] .`` with vLLM's requirements and build isolation; here ``--no-deps`` keeps the pinned
  closure (vLLM's own requirements pull CUDA wheels), and without build isolation
  setuptools-rust (``requirements/vllm_source_build.txt``) and the closure's setuptools
  build it offline (vLLM's Rust frontend is optional and left unbuilt);
- a record (``RECORD`` in the env's ``sys.prefix``) of what was installed: the tree, its
  commit, the main-verified commit, the closure. ``importing`` accepts a vLLM whose
  version is no release with a closure only when the record names it (``recorded``), and
  the report header says where it came from (``describe``).

No third-party import: it runs before vLLM is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from sim.impls.kit.ascend.checkout import CLOSURES, CheckoutError

SRC_VAR = "VLLM_SRC"
ANY_COMMIT_VAR = "VLLM_SRC_ANY_COMMIT"  # "1": test a vLLM tree at another commit than the main-verified one
MAIN_VERIFIED_FILE = ".github/vllm-main-verified.commit"
COMMIT = re.compile(r"[0-9a-f]{7,40}")  # what vllm-ascend's pr_test.yaml accepts in that file
BUILD_ENV = {"VLLM_TARGET_DEVICE": "empty", "PYTHONDONTWRITEBYTECODE": "1"}
BUILD_TOOLS = Path(__file__).resolve().parents[4] / "requirements" / "vllm_source_build.txt"
RECORD = "mtp-harness-vllm-source.json"


@dataclass(frozen=True)
class Source:
    """A vLLM source tree installed (or to be installed) by this recipe."""

    path: str
    commit: str  # the tree's HEAD when installed, 40 hex digits
    main_verified: str  # what the vllm-ascend checkout's vllm-main-verified.commit names
    closure: str  # the vLLM release whose closure it runs on (the checkout's release tag, without "v")
    version: str = ""  # vllm's distribution version, once installed

    @property
    def verified(self) -> bool:
        return self.commit.startswith(self.main_verified)


def any_commit(value: str | None) -> bool:
    """``VLLM_SRC_ANY_COMMIT``: unset, ``0`` or ``1``; anything else is refused naming it."""
    if value in (None, "", "0"):
        return False
    if value == "1":
        return True
    raise CheckoutError(f"{ANY_COMMIT_VAR}={value!r}: expected 1 (or 0, or unset)")


def main_verified(checkout: Path) -> str:
    """The vLLM main commit the vllm-ascend ``checkout`` is verified against."""
    path = checkout / MAIN_VERIFIED_FILE
    if not path.is_file():
        raise CheckoutError(f"{checkout}: no {MAIN_VERIFIED_FILE}, so no main-verified vLLM to check {SRC_VAR} against")
    commit = path.read_text().strip()
    if not COMMIT.fullmatch(commit):
        raise CheckoutError(f"{path}: {commit!r} is not a commit (7 to 40 lowercase hex digits)")
    return commit


def git_at_top(tree: Path, *args: str) -> str | None:
    """The output of ``git ARGS`` in ``tree`` if ``tree`` is the top of a git tree, else None: an sdist
    laid out inside another repository is not that repository's commit."""

    def git(*words: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tree), *words], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != Path(tree).resolve():
            return None
        return git(*args)
    except (OSError, subprocess.CalledProcessError):
        return None


def head_commit(tree: Path) -> str | None:
    """``git rev-parse HEAD`` of ``tree`` if it is the top of a git tree, else None."""
    return git_at_top(tree, "rev-parse", "HEAD")


def check(vllm_src: str, checkout: Path, closure: str, allow_any_commit: bool = False) -> Source:
    """The vLLM tree at ``vllm_src``, checked against ``checkout``'s main-verified commit."""
    tree = Path(vllm_src).resolve()
    if not (tree / "setup.py").is_file() or not (tree / "vllm").is_dir():
        raise CheckoutError(f"{SRC_VAR}={vllm_src}: not a vLLM source checkout (no setup.py and vllm/)")
    wanted = main_verified(checkout)
    commit = head_commit(tree)
    if commit is None:
        raise CheckoutError(f"{SRC_VAR}={vllm_src}: not the top of a git tree, so its commit cannot be checked")
    source = Source(str(tree), commit, wanted, closure)
    if not source.verified and not allow_any_commit:
        raise CheckoutError(
            f"{SRC_VAR}={tree} is vLLM at {commit}, not {wanted}, the commit {checkout / MAIN_VERIFIED_FILE} "
            f"names; check that one out, or set {ANY_COMMIT_VAR}=1 to test this one"
        )
    return source


def record_path(prefix: str = sys.prefix) -> Path:
    return Path(prefix) / RECORD


def install(source: Source, pip, prefix: str = sys.prefix) -> Source:
    """Build and install ``source`` into this env (``pip(*args, env=...)``), then record it."""
    pip("--no-deps", "--no-build-isolation", "-e", source.path, env=BUILD_ENV)
    version = subprocess.run(  # a fresh process: this one's metadata finders predate the install
        [sys.executable, "-c", "from importlib import metadata; print(metadata.version('vllm'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    installed = Source(source.path, source.commit, source.main_verified, source.closure, version)
    record_path(prefix).write_text(json.dumps(asdict(installed), indent=1) + "\n")
    print(f"recorded {record_path(prefix)}: vLLM {version} from {source.path} at {source.commit}", flush=True)
    return installed


def forget(prefix: str = sys.prefix) -> None:
    """Drop the record: the release leg installs vLLM from the index into this env."""
    record_path(prefix).unlink(missing_ok=True)


def editable_path(dist: str) -> str | None:
    """The source directory of an editable install of ``dist`` (its ``direct_url.json``), else None."""
    try:
        raw = metadata.distribution(dist).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    info = json.loads(raw) if raw else {}
    if not info.get("dir_info", {}).get("editable"):
        return None
    return str(Path(urllib.parse.unquote(urllib.parse.urlparse(info["url"]).path)).resolve())


def recorded(prefix: str = sys.prefix) -> Source | None:
    """The vLLM source install this recipe recorded, if it is the vLLM installed now: the record's
    version is the distribution's, vllm is an editable install of the recorded tree, and the
    closure is one the harness has. Anything else (no record, a stale one): None."""
    try:
        fields = json.loads(record_path(prefix).read_text())
        source = Source(**fields)
        version = metadata.version("vllm")
    except (OSError, ValueError, TypeError, metadata.PackageNotFoundError):
        return None
    if source.version != version or source.closure not in CLOSURES or editable_path("vllm") != source.path:
        return None
    return source


def supported(version: str, prefix: str = sys.prefix) -> bool:
    """Whether the adapter runs on the installed vLLM, ``version``: a release with a closure
    (``importing.VLLM_VERSIONS``), or a source tree this recipe installed on one (``recorded``)."""
    return version in CLOSURES or recorded(prefix) is not None


def describe(version: str, prefix: str = sys.prefix) -> str:
    """The report header's vLLM: ``vLLM 0.27.1``, or for a recorded source install
    ``vLLM 0.27.2.dev1+g757113c8d (source /path at 757113c8d1c2, main-verified; closure of v0.27.1)``."""
    source = recorded(prefix)
    if source is None:
        return f"vLLM {version}"
    head = head_commit(Path(source.path))
    if head is None:
        where = f"source {source.path}, no longer a git tree"
    elif head != source.commit:
        where = f"source {source.path} at {head[:12]}, moved since its install at {source.commit[:12]}"
    else:
        where = f"source {source.path} at {head[:12]}"
    verified = (
        "main-verified"
        if head and head.startswith(source.main_verified)
        else f"not the main-verified {source.main_verified[:12]}"
    )
    return f"vLLM {version} ({where}, {verified}; closure of v{source.closure})"


def from_env(environ: Mapping[str, str] = os.environ) -> tuple[str | None, bool]:
    """``VLLM_SRC`` (or None) and ``VLLM_SRC_ANY_COMMIT`` as a flag."""
    return environ.get(SRC_VAR) or None, any_commit(environ.get(ANY_COMMIT_VAR))
