"""An implementation's skips: printed where they apply, on the devices they name, and stale keys warned."""

from __future__ import annotations

import importlib
import warnings
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


ROOT = Path(__file__).resolve().parents[2]
PROPERTY = "test_graph_modes_match_reference"  # a property of the gate (tests/properties/test_propose_loop.py)


def _run(skips: dict, *paths: str) -> list[str]:
    """The skip-key warnings of a collection of ``paths`` under an implementation with ``skips``."""
    impl = Implementation("example", ops=None, proposer_cls=object, skips=skips)
    items = [SimpleNamespace(path=ROOT / path) for path in paths]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        conftest.pytest_collection_modifyitems(SimpleNamespace(mtp_impl=impl, rootpath=ROOT), items)
    return [str(w.message) for w in seen if "skip key" in str(w.message)]


def test_a_skip_key_that_names_no_property_warns_naming_it():
    got = _run({PROPERTY: "x", f"{PROPERTY}[padded]": "x", "test_no_such_property": "x"}, "tests/properties/test_x.py")
    assert got == ["example: skip key 'test_no_such_property' names no property of the gate"]


def test_a_run_of_a_few_properties_or_of_no_property_warns_of_nothing():
    """A key names a property the run did not collect (one module run alone): not stale, so silent;
    a differential suite's run collects no property at all."""
    assert _run({PROPERTY: "x"}, "tests/properties/test_core_properties.py") == []
    assert _run({"test_no_such_property": "x"}, "tests/impls/x/test_steps.py") == []


@pytest.mark.parametrize("impl", ["vllm", "vllm_ascend", "vllm_ascend_0_13", "vllm_mrv2"])
def test_every_built_in_skip_names_a_property(impl):
    """The adapters' skip tables (importable without their packages) name test functions that exist."""
    skips = importlib.import_module(f"sim.impls.{impl}.divergences").GATE_SKIPS
    stale = {key for key in skips if key.split("[")[0] not in conftest._property_names(ROOT)}
    assert not stale, f"{impl}: skip keys naming no property: {stale}"
