"""A pull request's changes first (``tests/impls/changed_first.py``): the order changes, never the set;
a base that is not a commit of the checkout is one clear error."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from tests.impls import changed_first

pytestmark = pytest.mark.order(-3)

NODES = [
    "tests/impls/vllm_ascend/test_handoff.py::test_a",
    "tests/properties/test_propose_loop.py::test_b",
    "tests/impls/vllm_ascend/test_prepare.py::test_c",
    "tests/properties/test_core_properties.py::test_d",
    "tests/impls/vllm_ascend/test_graphs.py::test_e",
]


def _checkout(tmp_path, *changed: str):
    """A git tree with one commit (its id returned), then ``changed`` edited on top."""

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "base")
    base = git("rev-parse", "HEAD").stdout.strip()
    for path in changed:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x\n")
        git("add", path)
    return base


def _ordered(monkeypatch, tmp_path, *changed: str) -> list[str]:
    monkeypatch.setenv(changed_first.SRC_VAR, str(tmp_path))
    monkeypatch.setenv(changed_first.BASE_VAR, _checkout(tmp_path, *changed))
    items = [SimpleNamespace(nodeid=n) for n in NODES]
    changed_first.pytest_collection_modifyitems(None, items)
    return [i.nodeid for i in items]


def test_a_kernel_change_runs_the_kernel_tests_first_and_every_test(monkeypatch, tmp_path):
    got = _ordered(monkeypatch, tmp_path, "vllm_ascend/ops/triton/spec_decode/utils.py")
    assert got[:2] == [NODES[2], NODES[3]] and sorted(got) == sorted(NODES)
    assert got[2:] == [NODES[0], NODES[1], NODES[4]], "the rest keeps the gate's order"


def test_an_mrv2_change_runs_the_mrv2_speculators_tests_first(monkeypatch, tmp_path):
    """In the session of both (``--impl vllm_ascend,vllm_ascend_mrv2``): its suite and the gate's
    properties of it, the V1 proposer's after."""
    nodes = [
        "tests/properties/test_propose_loop.py::test_b[vllm_ascend-padded]",
        "tests/impls/vllm_ascend/test_prepare.py::test_c",
        "tests/properties/test_propose_loop.py::test_b[vllm_ascend_mrv2-padded]",
        "tests/impls/vllm_ascend_mrv2/test_steps.py::test_f",
    ]
    monkeypatch.setenv(changed_first.SRC_VAR, str(tmp_path))
    monkeypatch.setenv(changed_first.BASE_VAR, _checkout(tmp_path, "vllm_ascend/worker/v2/model_runner.py"))
    items = [SimpleNamespace(nodeid=n) for n in nodes]
    changed_first.pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [nodes[2], nodes[3], nodes[0], nodes[1]]


def test_a_change_no_area_names_keeps_the_gate_order(monkeypatch, tmp_path):
    assert _ordered(monkeypatch, tmp_path, "docs/README.md") == NODES


def test_without_a_base_nothing_changes(monkeypatch):
    monkeypatch.delenv(changed_first.BASE_VAR, raising=False)
    assert changed_first.changed_paths() is None


@pytest.mark.parametrize("src", [True, False])
def test_a_base_that_is_no_commit_of_the_checkout_is_one_error_naming_it(monkeypatch, tmp_path, src):
    _checkout(tmp_path)
    monkeypatch.setenv(changed_first.BASE_VAR, "no-such-commit")
    if src:
        monkeypatch.setenv(changed_first.SRC_VAR, str(tmp_path))
    else:
        monkeypatch.delenv(changed_first.SRC_VAR, raising=False)
    with pytest.raises(pytest.UsageError, match=r"VLLM_ASCEND_BASE=no-such-commit"):
        changed_first.changed_paths()
