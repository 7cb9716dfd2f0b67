"""What an implementation lacks: declared by feature, never by test name, and skipped with its reason
where a property of the implementation uses it, on the devices the reason names."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from _pytest.outcomes import Skipped

from sim.impls import Implementation, Skip
from sim.impls.features import Feature, used
from sim.serving.scenario import Scenario
from tests import plugin

pytestmark = pytest.mark.order(-3)

IMPL = Implementation(
    "example",
    ops=None,
    proposer_cls=object,
    lacks={
        Feature.FULL_GRAPHS: Skip("its graphs need an NPU", devices=("sim", "cuda")),
        Feature.PIECEWISE_GRAPHS: "cannot run at all",
        Feature.UNPADDED_FULL_GRAPHS: Skip("refused unpadded"),
    },
)


@pytest.mark.parametrize(
    "features, device, reason",
    [
        ({Feature.FULL_GRAPHS}, "sim", "lacks full graphs: its graphs need an NPU"),
        ({Feature.FULL_GRAPHS}, "npu", None),
        ({Feature.PIECEWISE_GRAPHS}, "npu", "lacks piecewise graphs: cannot run at all"),
        ({Feature.UNPADDED}, "sim", None),
        ({Feature.UNPADDED, Feature.FULL_GRAPHS}, "npu", "lacks full graphs on the unpadded path: refused unpadded"),
        (set(), "sim", None),
    ],
)
def test_a_lacking_feature_applies_on_the_devices_it_names_only(features, device, reason):
    assert IMPL.lacking(features, device) == reason


@pytest.mark.parametrize("first", [Feature.UNPADDED, Feature.DRAFT_MODEL])
def test_a_combined_feature_is_used_by_its_combination_only(first):
    """Unpadded, or a draft model, with full graphs uses their combination; with piecewise graphs, not."""
    combined = {Feature.UNPADDED: Feature.UNPADDED_FULL_GRAPHS, Feature.DRAFT_MODEL: Feature.DRAFT_MODEL_FULL_GRAPHS}
    assert used({first, Feature.FULL_GRAPHS}) == {first, Feature.FULL_GRAPHS, combined[first]}
    assert used({first, Feature.PIECEWISE_GRAPHS}) == {first, Feature.PIECEWISE_GRAPHS}


ROOT = Path(__file__).resolve().parents[2]


def _setup(fixtures: list[str], *features: Feature, path: str = "tests/properties/test_x.py") -> str | None:
    """The gate's setup of an item of ``path`` using ``features`` under ``IMPL`` on sim: the skip reason, or None."""
    marks = [SimpleNamespace(args=features)] if features else []
    item = SimpleNamespace(
        config=SimpleNamespace(mtp_impls={IMPL.name: IMPL}, mtp_device=SimpleNamespace(name="sim")),
        path=ROOT / path,
        fixturenames=fixtures,
        iter_markers=lambda name: marks if name == "uses" else [],
    )
    try:
        plugin.pytest_runtest_setup(item)
    except Skipped as skipped:
        return skipped.msg
    return None


def test_a_property_of_the_implementation_skips_what_it_lacks_with_its_reason():
    assert (
        _setup(["device", "impl"], Feature.FULL_GRAPHS) == "example on sim: lacks full graphs: its graphs need an NPU"
    )
    assert _setup(["device", "impl"], Feature.UNPADDED) is None


def test_a_test_of_the_core_alone_runs_whatever_the_implementation_lacks():
    """The core's own tests in a graph mode (no ``impl`` fixture) are not the implementation's to skip."""
    assert _setup(["device"], Feature.FULL_GRAPHS) is None


def test_a_test_of_an_implementations_suite_skips_what_it_lacks_without_the_impl_fixture():
    """A test of ``tests/impls/NAME/`` is the implementation's, whatever fixtures it takes (its rank pools)."""
    reason = _setup(["pool"], Feature.FULL_GRAPHS, path="tests/impls/x/test_y.py")
    assert reason == "example on sim: lacks full graphs: its graphs need an NPU"


def _features_used() -> set[Feature]:
    """The features the gate's properties mark, read off their ``uses`` marks (their own and their
    module's) and those of their parametrizations (``pytest.param(..., marks=...)``)."""
    found = set()
    for path in sorted((ROOT / "tests" / "properties").glob("test_*.py")):
        module = importlib.import_module(f"tests.properties.{path.stem}")
        on_module = getattr(module, "pytestmark", [])
        on_module = list(on_module) if isinstance(on_module, list | tuple) else [on_module]
        for name, fn in vars(module).items():
            marks = [*on_module, *getattr(fn, "pytestmark", [])] if name.startswith("test_") else []
            params = [v for m in marks if m.name == "parametrize" for v in m.args[1]]
            marks += [m for v in params if isinstance(v, type(pytest.param(None))) for m in v.marks]
            found.update(f for m in marks if m.name == "uses" for f in m.args)
    return found


# Used otherwise: unpadded with full graphs, a draft model's full graphs and kernel blocks, an MLA or SFA draft's full
# graphs, through ``used``; reduce
# sampling by vllm-ascend's TP suites; its balance, recompute and dynamic batch schedulers and main's waiting-queue
# orders by its schedulers' suite (its pins read the lacks).
OTHERWISE_USED = (
    Feature.UNPADDED_FULL_GRAPHS,
    Feature.DRAFT_MODEL_FULL_GRAPHS,
    Feature.DRAFT_MODEL_KERNEL_BLOCKS,
    Feature.MLA_FULL_GRAPHS,
    Feature.SFA_FULL_GRAPHS,
    Feature.REDUCE_SAMPLE,
    Feature.BALANCE_SCHEDULING,
    Feature.RECOMPUTE_SCHEDULER,
    Feature.DYNAMIC_BATCH,
    Feature.SHORT_REQUEST_FIRST,
    Feature.BATCH_JOB_AWARE,
)


@pytest.mark.parametrize("feature", [f for f in Feature if f not in OTHERWISE_USED])
def test_every_feature_is_used_by_a_property(feature):
    """A feature no property marks would let an adapter declare a lack that skips nothing."""
    assert feature in _features_used(), f"{feature} is marked by no property"


@pytest.mark.parametrize("impl", ["vllm", "vllm_ascend", "vllm_ascend_0_13", "vllm_mrv2", "vllm_ascend_mrv2"])
def test_every_built_in_adapter_declares_features_only(impl):
    """The adapters' tables (importable without their upstream packages) name features, each with a reason."""
    lacks = importlib.import_module(f"sim.impls.{impl}.divergences").LACKS
    assert lacks and all(isinstance(f, Feature) and isinstance(s, Skip) and s.reason for f, s in lacks.items())


class _Item(SimpleNamespace):
    __hash__ = object.__hash__  # as pytest's items are


def _collected(impl_name: str) -> tuple[list[str], list[str]]:
    """(kept, deselected) node paths of the gate's collection hook under an implementation named so."""
    items = [
        _Item(path=ROOT / "tests/properties/test_x.py", fixturenames=["device", "impl"], name="of_impl"),
        _Item(path=ROOT / "tests/properties/test_x.py", fixturenames=["device"], name="of_core"),
        _Item(path=ROOT / "tests/impls/x/test_y.py", fixturenames=["device"], name="of_suite"),
    ]
    deselected = []
    config = SimpleNamespace(
        mtp_impls={impl_name: SimpleNamespace(name=impl_name)},
        mtp_absent={},
        hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(i.name for i in items)),
    )
    plugin.pytest_collection_modifyitems(config, items)
    return [i.name for i in items], deselected


def test_under_an_implementation_a_property_of_the_core_alone_is_deselected_and_said():
    """A gate property that never takes ``impl`` checks the core, which ``tox -e sim`` runs; a
    differential suite's tests stay whatever fixtures they take."""
    assert _collected("vllm") == (["of_impl", "of_suite"], ["of_core"])
    assert _collected("core") == (["of_impl", "of_core", "of_suite"], [])


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"graph_mode": "piecewise"}, "graph_mode='piecewise': example lacks piecewise graphs: cannot run at all"),
        ({"graph_mode": "full", "padded": False}, "padded=False with graph_mode='full': example lacks full graphs on"),
        ({"padded": False}, None),
        ({"graph_mode": "full"}, None),  # its full graphs lack only on the devices their reason names
    ],
)
def test_a_serving_run_of_a_padding_or_graph_mode_it_lacks_is_refused_by_name(fields, said):
    """A run asks for what a property would skip: its padding, its graph mode, or their combination."""
    refusal = IMPL.refuses(Scenario(**fields), "npu")
    assert refusal is None if said is None else refusal.startswith(said), refusal
