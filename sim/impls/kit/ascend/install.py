"""``python -m sim.impls.kit.ascend.install [--line ENV]``: vLLM and the vllm-ascend under test into this
env (tox's ``commands_pre`` of ``tox -e vllm_ascend``, and of ``tox -e vllm_ascend_0_13`` with ``--line
vllm_ascend_0_13``), as ``checkout``'s docstring describes: the released wheels, a checkout (the line's
variable: ``VLLM_ASCEND_SRC``, ``VLLM_ASCEND_0_13_SRC``), and, on the ``vllm_ascend`` line, vLLM from a
source tree (``VLLM_SRC``, ``vllm_source``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sim.impls.kit.ascend import checkout, vllm_source
from sim.impls.kit.ascend.checkout import ASCEND, BUILD_ENV, LINES, ROOT, SRC_VAR, TAG_FILE, CheckoutError, Line


def _pip(*args: str, env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-compile", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, **(env or {})})


RECORD = Path(sys.prefix) / "mtp-checkout-install.json"  # the checkout installed here, on the index's vLLM


def install(src: str | None, vllm_src: str | None = None, any_commit: bool = False, line: Line = ASCEND) -> None:
    """Install vLLM and vllm-ascend of ``line`` into this env: from ``src`` (a checkout), or the released
    wheels; vLLM from the source tree ``vllm_src`` (checked against the checkout's main-verified commit
    unless ``any_commit``), or the release the checkout pairs with."""
    if vllm_src and not src:
        raise CheckoutError(
            f"{vllm_source.SRC_VAR}={vllm_src} needs {SRC_VAR}=<vllm-ascend checkout>: "
            f"its {vllm_source.MAIN_VERIFIED_FILE} names the commit, its {TAG_FILE} the closure"
        )
    if not src:
        vllm = line.release_vllm
        _pip("-r", str(ROOT / line.closures[vllm]))
        _pip("--no-deps", f"vllm=={vllm}")
        vllm_source.forget()
        editable = vllm_source.editable_path("vllm-ascend") is not None
        force = ["--force-reinstall"] if editable else []  # a checkout installed by an earlier run
        _pip("--no-deps", *force, f"vllm-ascend=={line.release}")
        RECORD.unlink(missing_ok=True)
        return
    tree = Path(src).resolve()
    if not tree.is_dir():
        raise CheckoutError(f"{line.src_var}={src}: not a directory")
    vllm = checkout.paired_vllm(tree, line)
    closure = ROOT / line.closures[vllm]
    wanted = {"tree": str(tree), "vllm": vllm, "digest": checkout.packaging_digest(tree, closure)}
    if not vllm_src and installed_already(wanted):
        print(f"{line.src_var}={tree}: installed here already, on vLLM {vllm}, its packaging unchanged", flush=True)
        return
    RECORD.unlink(missing_ok=True)
    if vllm_src:  # checked before anything is installed
        source = vllm_source.check(vllm_src, tree, vllm, any_commit)
        _pip("-r", str(closure), "-r", str(vllm_source.BUILD_TOOLS))
        vllm_source.install(source, _pip)
    else:
        _pip("-r", str(closure))
        _pip("--no-deps", f"vllm=={vllm}")
        vllm_source.forget()
    _pip("--no-deps", "--no-build-isolation", "-e", str(tree), env=BUILD_ENV)
    if not vllm_src:
        RECORD.write_text(json.dumps(wanted) + "\n")


def installed_already(wanted: dict) -> bool:
    """Whether this env holds the checkout ``wanted`` names as the recipe installs it, nothing since:
    its record says so (the same tree, vLLM and packaging digest: the closure and the checkout's
    packaging files), vLLM is that release (no source tree recorded), and vllm-ascend is that tree,
    editable. A pull request's second run then skips the installs (Python files are read live)."""
    from importlib import metadata

    try:
        recorded = json.loads(RECORD.read_text())
        version = metadata.version("vllm")
    except (OSError, ValueError, metadata.PackageNotFoundError):
        return False
    from_source = vllm_source.record_path().exists()
    tree = vllm_source.editable_path("vllm-ascend")
    return recorded == wanted and version == wanted["vllm"] and not from_source and tree == wanted["tree"]


def main(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m sim.impls.kit.ascend.install", description="vLLM and the vllm-ascend under test into this env"
    )
    parser.add_argument("--line", default="vllm_ascend", choices=sorted(LINES), help="the env's line of releases")
    line = LINES[parser.parse_args(argv).line]
    vllm_from_source = vllm_source.from_env() if line is ASCEND else ()  # that line's leg only
    install(os.environ.get(line.src_var), *vllm_from_source, line=line)


if __name__ == "__main__":
    main(sys.argv[1:])
