"""What a vllm-ascend checkout is to the harness: the vLLM it pairs with, the closure it runs on, and
a released vllm-ascend laid out as one. Standard library only (``install`` does the installing).

``python -m sim.impls.kit.ascend.install`` (tox's ``commands_pre``):

- ``VLLM_ASCEND_SRC`` unset: the released wheels, ``vllm==0.23.0`` and
  ``vllm-ascend==0.23.0``, with ``--no-deps`` on the pinned closure.
- ``VLLM_ASCEND_SRC=<checkout>``: the vLLM the checkout pairs with, read from its
  ``.github/vllm-release-tag.commit`` as vllm-ascend's own CI reads it, installed
  with ``--no-deps`` on that version's closure (``CLOSURES``); then the checkout
  itself as vllm-ascend's CPU jobs install it (``SOC_VERSION=ascend910b1
  COMPILE_CUSTOM_KERNELS=0 pip install --no-deps --no-build-isolation -e .``:
  writes ``_build_info.py``, registers the platform plugin, compiles nothing).
  A vLLM version without a closure here stops with one line naming it and the
  supported ones (exit 2).
- ``VLLM_SRC=<vLLM source checkout>`` as well: the main-verified leg (``vllm_source``).
  vLLM is built from that tree as vllm-ascend's CI builds it (``VLLM_TARGET_DEVICE=empty
  pip install --no-deps --no-build-isolation -e``) on the closure of the release the tag
  file names (the main-verified commit is newer than that release), after its ``git``
  HEAD is checked against the checkout's ``.github/vllm-main-verified.commit``: a
  mismatch stops with one line naming both commits (exit 2) unless
  ``VLLM_SRC_ANY_COMMIT=1``. Then the checkout as above.

``python sim/impls/kit/ascend/checkout.py released-source DEST`` (``.ci/run``,
which reaches the package index only): the sdist of the released vllm-ascend laid
out as a checkout in DEST, with the ``.github/vllm-release-tag.commit`` of its git
tag (the sdist does not ship ``.github/``), so CI runs the checkout recipe on
released sources. Standard library only: it runs before any env exists.

Nothing writes bytecode into the checkout: ``PYTHONDONTWRITEBYTECODE`` for the
install, and tox's ``PYTHONPYCACHEPREFIX`` for the test runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
# vLLM version -> the pinned closure (requirements file) it imports and runs the spec-decode path on.
# One file serves every release the adapter's generations run on (docs/upstream-ci.md, "Every branch").
CLOSURES = {
    "0.18.0": "requirements/vllm_ascend.txt",  # releases/v0.18.0 (its docs conf names it)
    "0.20.2": "requirements/vllm_ascend.txt",  # releases/v0.20.2rc
    "0.21.0": "requirements/vllm_ascend.txt",  # releases/v0.21.0rc
    "0.22.1": "requirements/vllm_ascend.txt",  # releases/v0.22.1rc
    "0.23.0": "requirements/vllm_ascend.txt",  # vllm-ascend 0.23.0 (the release, its v0.23.0 tag; releases/v0.23.0)
    "0.24.0": "requirements/vllm_ascend.txt",  # releases/v0.24.0rc
    "0.25.1": "requirements/vllm_ascend.txt",  # releases/v0.25.1rc
    "0.26.0": "requirements/vllm_ascend.txt",  # releases/v0.26.0rc
    "0.27.1": "requirements/vllm_ascend.txt",  # vllm-ascend main (snapshot of 2026-08-22)
}
BUILD_TOOLS = ROOT / "requirements" / "vllm_ascend_build.txt"
RELEASE = "0.23.0"  # the released vllm-ascend tested without a checkout (wheel) and by .ci/run (sdist)
RELEASE_VLLM = {"0.23.0": "v0.23.0"}  # a release -> its tag's .github/vllm-release-tag.commit
TAG_FILE = ".github/vllm-release-tag.commit"
DOCS_CONF = "docs/source/conf.py"  # names the vLLM on branches older than the tag file
SRC_VAR = "VLLM_ASCEND_SRC"


@dataclass(frozen=True)
class Line:
    """The vllm-ascend releases one env runs, its adapter's generations: the variable that names a
    checkout for it, the vLLM a checkout may pair with (-> the closure it runs on), and the release
    tested without a checkout, with the vLLM it pairs with."""

    env: str
    src_var: str
    closures: dict[str, str]
    release: str
    release_vllm: str


LINES = {
    line.env: line
    for line in (
        Line("vllm_ascend", SRC_VAR, CLOSURES, RELEASE, RELEASE_VLLM[RELEASE].removeprefix("v")),
        # releases/v0.13.0 and its 0.13.0 release: 0.13's MtpProposer, the vllm_ascend_0_13 adapter's. A
        # variable of its own, so that one tox run serves a checkout of each line (.ci/run sets SRC_VAR).
        Line(
            "vllm_ascend_0_13",
            "VLLM_ASCEND_0_13_SRC",
            {"0.13.0": "requirements/vllm_ascend_0_13.txt"},
            "0.13.0",
            "0.13.0",
        ),
    )
}
ASCEND = LINES["vllm_ascend"]  # the line of tox -e vllm_ascend, the default everywhere
PACKAGING = ("setup.py", "pyproject.toml", "requirements.txt", TAG_FILE)  # what decides how a checkout installs
BUILD_ENV = {"SOC_VERSION": "ascend910b1", "COMPILE_CUSTOM_KERNELS": "0", "PYTHONDONTWRITEBYTECODE": "1"}


class CheckoutError(SystemExit):
    """One line on stderr naming what is wrong, exit status 2."""

    def __init__(self, message: str):
        print(f"vllm_ascend checkout: {message}", file=sys.stderr)
        super().__init__(2)


def packaging_digest(tree: Path, *more: Path) -> str:
    """A digest of what decides how the checkout ``tree`` installs (its ``PACKAGING`` files) and of the
    files ``more`` (a closure): equal digests install the same."""
    files = [tree / name for name in PACKAGING] + list(more)
    return hashlib.sha256(b"".join(f.read_bytes() for f in files if f.is_file())).hexdigest()


def paired_vllm(src: Path, line: Line = ASCEND) -> str:
    """The vLLM release the checkout pairs with (``v0.27.1`` in its tag file -> ``0.27.1``), one of ``line``'s."""
    why = unpaired_reason(src, line=line)
    if why:
        raise CheckoutError(why)
    return paired_tag(src)[0].removeprefix("v")


def paired_tag(src: Path) -> tuple[str, str] | None:
    """(the vLLM tag the checkout names, the file that names it), or ``None``. The tag file where the
    checkout has one (main and the branches since v0.21.0rc); else, on the older release branches,
    the ``pip_vllm_version`` of ``docs/source/conf.py``, the vLLM their docs and CI install."""
    if (src / TAG_FILE).is_file():
        return (src / TAG_FILE).read_text().strip(), TAG_FILE
    conf = src / DOCS_CONF
    if not conf.is_file():
        return None
    found = re.search(r"""["']pip_vllm_version["']\s*:\s*["']([^"']+)["']""", conf.read_text())
    return (found[1], f"{DOCS_CONF} pip_vllm_version") if found else None


def unpaired_reason(src: Path, label: str | None = None, line: Line = ASCEND) -> str | None:
    """Why the checkout (named ``label``, else its path) pairs with no vLLM ``line`` has a closure for, or
    ``None`` when it does."""
    paired = paired_tag(src)
    if paired is None:
        return f"{label or f'{line.src_var}={src}'}: no {TAG_FILE} nor {DOCS_CONF} (is it a vllm-ascend checkout?)"
    tag, where = paired
    if tag.removeprefix("v") not in line.closures:
        other = [o.env for o in LINES.values() if o is not line and tag.removeprefix("v") in o.closures]
        return (
            f"{label or src} pairs with vLLM {tag!r} ({where}); the harness has closures for vLLM "
            f"{', '.join(sorted(line.closures))} only (sim/impls/kit/ascend/checkout.py LINES)"
            + (f"; tox -e {other[0]} runs it ({LINES[other[0]].src_var}=<checkout>)" if other else "")
        )
    return None


def released_source(dest: str, version: str = RELEASE) -> Path:
    """The sdist of vllm-ascend ``version`` unpacked into ``dest`` as a checkout (no ``_build_info.py``)."""
    out = Path(dest).resolve()
    if (out / TAG_FILE).is_file():
        return out  # laid out by an earlier run
    with tempfile.TemporaryDirectory() as tmp:
        # pip builds an sdist's metadata before it keeps the file. Without build isolation (its
        # build-system list pins torch-npu and torch 2.10) it needs setuptools and setuptools-scm:
        # a throwaway venv with the pinned ones, so any bare python3 can run this.
        tools = Path(tmp, "tools")
        venv.create(tools, with_pip=True)
        python = str(tools / "bin" / "python")
        quiet = ["--quiet", "--disable-pip-version-check"]
        subprocess.run([python, "-m", "pip", "install", *quiet, "-r", str(BUILD_TOOLS)], check=True)
        cmd = [python, "-m", "pip", "download", *quiet, "--no-deps", "--no-binary", ":all:", "--no-build-isolation"]
        subprocess.run([*cmd, "-d", tmp, f"vllm-ascend=={version}"], check=True, env={**os.environ, **BUILD_ENV})
        (sdist,) = Path(tmp).glob("vllm_ascend-*.tar.gz")
        with tarfile.open(sdist) as tar:
            top = tar.getnames()[0].split("/")[0]
            tar.extractall(tmp, filter="data")
        out.parent.mkdir(parents=True, exist_ok=True)
        Path(tmp, top).rename(out)
    if (out / "vllm_ascend" / "_build_info.py").exists():
        (out / "vllm_ascend" / "_build_info.py").unlink()  # what a git checkout lacks until setup.py runs
    tag_file = out / TAG_FILE
    if not tag_file.exists():
        tag_file.parent.mkdir(parents=True, exist_ok=True)
        tag_file.write_text(RELEASE_VLLM[version] + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python sim/impls/kit/ascend/checkout.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("released-source", help="lay out a released vllm-ascend's sdist as a checkout")
    rel.add_argument("dest")
    rel.add_argument("--version", default=RELEASE, choices=sorted(RELEASE_VLLM))
    args = parser.parse_args(argv)
    print(released_source(args.dest, args.version))


if __name__ == "__main__":
    main()
