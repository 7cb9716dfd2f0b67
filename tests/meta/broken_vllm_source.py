"""Deliberately broken variants of the main-verified leg (``sim/impls/kit/ascend/vllm_source.py``):
each must fail the checks of tests/harness/test_vllm_source.py that the real one passes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sim.impls.kit.ascend import checkout, vllm_source
from sim.impls.kit.ascend.checkout import CheckoutError
from sim.impls.kit.ascend.vllm_source import Source

_check = vllm_source.check  # the real one, before a test puts a variant in its place


def check_skipped(vllm_src: str, src: Path, closure: str, allow_any_commit: bool = False) -> Source:
    """The commit check skipped: any tree is taken as the main-verified one."""
    tree = Path(vllm_src).resolve()
    wanted = vllm_source.main_verified(src)
    return Source(str(tree), vllm_source.head_commit(tree) or "", wanted, closure)


def check_without_override(vllm_src: str, src: Path, closure: str, allow_any_commit: bool = False) -> Source:
    """The override ignored: a mismatch stops even with ``VLLM_SRC_ANY_COMMIT=1``."""
    return _check(vllm_src, src, closure, allow_any_commit=False)


def check_exact(vllm_src: str, src: Path, closure: str, allow_any_commit: bool = False) -> Source:
    """The file's commit compared as a whole: a 7-digit prefix (which vllm-ascend accepts) refused."""
    source = _check(vllm_src, src, closure, allow_any_commit=True)
    if source.commit != source.main_verified and not allow_any_commit:
        raise CheckoutError(f"{vllm_src} is at {source.commit}, not {source.main_verified}")
    return source


def any_commit_lenient(value: str | None) -> bool:
    """Any non-empty ``VLLM_SRC_ANY_COMMIT`` taken as yes (``yes``, ``true``, a typo)."""
    return bool(value)


def paired_vllm_newest_for_any_tag(src: Path, line: checkout.Line = checkout.ASCEND) -> str:
    """A release tag without a closure runs on the newest closure instead of stopping."""
    version = (src / checkout.TAG_FILE).read_text().strip().removeprefix("v")
    return version if version in line.closures else max(line.closures)


def recorded_whatever_installed(prefix: str = sys.prefix) -> Source | None:
    """The record trusted as it is: a stale one (another vLLM installed since) still accepted."""
    try:
        return Source(**json.loads(vllm_source.record_path(prefix).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def supported_any(version: str, prefix: str = sys.prefix) -> bool:
    """The refusal skipped: every vLLM version accepted."""
    return True


def supported_releases_only(version: str, prefix: str = sys.prefix) -> bool:
    """The record never consulted: a source-built vLLM refused like an unknown one."""
    return version in vllm_source.CLOSURES


def describe_version_only(version: str, prefix: str = sys.prefix) -> str:
    """The header without the source: a source-built vLLM reads like a release."""
    return f"vLLM {version}"


def describe_always_verified(version: str, prefix: str = sys.prefix) -> str:
    """The header calls every recorded tree main-verified, the overridden ones too."""
    source = vllm_source.recorded(prefix)
    if source is None:
        return f"vLLM {version}"
    return f"vLLM {version} (source {source.path} at {source.commit[:12]}, main-verified; closure of v{source.closure})"
