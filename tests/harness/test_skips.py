"""An implementation's skips: printed where they apply, on the devices they name, and stale keys warned."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest

import conftest
from sim.impls import Implementation, Skip

pytestmark = pytest.mark.order(0)

IMPL = Implementation(
    "example",
    ops=None,
    proposer_cls=object,
    skips={
        "test_graphs": Skip("its graphs need an NPU", devices=("sim", "cuda")),
        "test_anywhere": "cannot run at all",
        "test_one[padded]": Skip("one parametrization only"),
    },
)


@pytest.mark.parametrize(
    "names, device, reason",
    [
        (("test_graphs[full]", "test_graphs"), "sim", "its graphs need an NPU"),
        (("test_graphs[full]", "test_graphs"), "npu", None),
        (("test_anywhere", "test_anywhere"), "npu", "cannot run at all"),
        (("test_one[padded]", "test_one"), "sim", "one parametrization only"),
        (("test_one[unpadded]", "test_one"), "sim", None),
        (("test_other", "test_other"), "sim", None),
    ],
)
def test_a_skip_applies_on_the_devices_it_names_only(names, device, reason):
    assert IMPL.skip_for(names, device) == reason


def _items(*names):
    path = Path("tests/properties/test_x.py")
    return [SimpleNamespace(name=n, originalname=n.split("[")[0], path=path) for n in names]


def test_a_skip_key_that_matches_no_test_warns_naming_it():
    config = SimpleNamespace(mtp_impl=IMPL)
    with pytest.warns(pytest.PytestWarning, match="example: skip key 'test_anywhere' matches no collected test"):
        conftest.pytest_collection_modifyitems(config, _items("test_graphs[full]", "test_one[padded]"))


def test_skip_keys_that_all_match_are_silent(recwarn):
    config = SimpleNamespace(mtp_impl=IMPL)
    conftest.pytest_collection_modifyitems(config, _items("test_graphs[eager]", "test_anywhere", "test_one[padded]"))
    assert not [w for w in recwarn if "skip key" in str(w.message)]


def test_a_run_without_the_gates_properties_checks_no_skip_key(recwarn):
    """A differential suite's run collects none of the properties the skips name: nothing to warn."""
    items = [SimpleNamespace(name="test_steps", originalname="test_steps", path=Path("tests/impls/x/test_steps.py"))]
    conftest.pytest_collection_modifyitems(SimpleNamespace(mtp_impl=IMPL), items)
    assert not [w for w in recwarn if "skip key" in str(w.message)]


@pytest.mark.parametrize("impl", ["vllm", "vllm_ascend", "vllm_ascend_0_13"])
def test_every_built_in_skip_names_a_property(impl):
    """The adapters' skip tables (importable without their packages) name test functions that exist."""
    skips = importlib.import_module(f"sim.impls.{impl}.divergences").GATE_SKIPS
    root = Path(__file__).resolve().parents[1] / "properties"
    defined = {
        node.name
        for path in root.glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    assert set(skips) <= defined, f"{impl}: skip keys naming no property: {set(skips) - defined}"
