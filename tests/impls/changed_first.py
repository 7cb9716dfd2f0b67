"""A vllm-ascend pull request's gate, what its changes can affect first: the order changes, never the set.

With ``VLLM_ASCEND_BASE=<commit>`` beside ``VLLM_ASCEND_SRC=<checkout>``, the paths the checkout changed
since that commit (``git diff --name-only BASE``: its commits and its uncommitted edits) pick the tests
that run first: a change to ``vllm_ascend/ops/triton/spec_decode/`` runs the kernel's tests and the
single-call properties before the serving runs, one to ``vllm_ascend/compilation/`` the graph tests.
``AREAS`` is the map, by path prefix; a change it does not name leaves the gate's own order (cheap,
sensitive tests first). Every test still runs: a pull request's verdict comes from the whole gate.
"""

from __future__ import annotations

import functools
import os
import subprocess

import pytest

BASE_VAR, SRC_VAR = "VLLM_ASCEND_BASE", "VLLM_ASCEND_SRC"

# A changed path's prefix -> the tests it can affect: substrings of their node ids.
AREAS = (
    (
        "vllm_ascend/ops/triton/spec_decode/",
        ("test_prepare.py", "test_steps.py", "test_upstream.py", "test_core_properties.py"),
    ),
    (
        "vllm_ascend/spec_decode/",
        ("test_step_one.py", "test_prepare.py", "test_steps.py", "test_propose.py", "test_core_properties.py"),
    ),
    ("vllm_ascend/compilation/", ("test_graphs.py", "test_npu_graphs.py", "graph_mode")),
    (
        "vllm_ascend/attention/",
        (
            "test_attn_setup.py",
            "test_mla_builder.py",
            "test_gate_catches_mla.py",
            "test_sfa_builder.py",
            "test_propose.py",
            "test_propose_loop.py",
        ),
    ),
    ("vllm_ascend/worker/model_runner_v1.py", ("test_handoff.py", "test_early_copies.py", "test_data_parallel.py")),
    ("vllm_ascend/ascend_forward_context.py", ("test_data_parallel.py",)),
    # the MRV2 speculator's: its suite, and the gate's properties of it (their id names it first)
    ("vllm_ascend/worker/v2/", ("vllm_ascend_mrv2/", "[vllm_ascend_mrv2")),
)


def changed_paths() -> tuple[str, ...] | None:
    """The paths the checkout changed since ``VLLM_ASCEND_BASE``, or None where it is not set."""
    return _changed(os.environ.get(BASE_VAR), os.environ.get(SRC_VAR))


@functools.cache  # asked by the header and the collection of each process
def _changed(base: str | None, src: str | None) -> tuple[str, ...] | None:
    if not base:
        return None
    if not src:
        raise pytest.UsageError(f"{BASE_VAR}={base} needs {SRC_VAR}=<the vllm-ascend checkout it is a commit of>")
    run = subprocess.run(["git", "-C", src, "diff", "--name-only", base], capture_output=True, text=True)
    if run.returncode:
        raise pytest.UsageError(f"{BASE_VAR}={base}: not a commit of {SRC_VAR}={src} ({run.stderr.strip()})")
    return tuple(run.stdout.split())


def affected(changed: list[str]) -> tuple[str, ...]:
    """The node-id substrings of the tests ``changed`` can affect."""
    return tuple(t for prefix, tests in AREAS if any(p.startswith(prefix) for p in changed) for t in tests)


def describe(changed: list[str]) -> str:
    areas = [prefix for prefix, _ in AREAS if any(p.startswith(prefix) for p in changed)]
    first = f"first, the tests of {', '.join(areas)}" if areas else "no area of AREAS: the gate's own order"
    return f"{BASE_VAR}: {len(changed)} paths changed; {first} (then every other test)"


@pytest.hookimpl(trylast=True)  # after pytest-order has put the gate in its order
def pytest_collection_modifyitems(config, items):
    changed = changed_paths()
    if not changed:
        return
    marks = affected(changed)
    if marks:
        items[:] = sorted(items, key=lambda item: not any(m in item.nodeid for m in marks))  # stable


def pytest_report_header(config):
    changed = changed_paths()
    return [describe(changed)] if changed is not None else []
