"""An implementation's skips: printed where they apply, on the devices they name, and stale keys warned."""

from __future__ import annotations

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
    return [SimpleNamespace(name=n, originalname=n.split("[")[0]) for n in names]


def test_a_skip_key_that_matches_no_test_warns_naming_it():
    config = SimpleNamespace(mtp_impl=IMPL)
    with pytest.warns(pytest.PytestWarning, match="example: skip key 'test_anywhere' matches no collected test"):
        conftest.pytest_collection_modifyitems(config, _items("test_graphs[full]", "test_one[padded]"))


def test_skip_keys_that_all_match_are_silent(recwarn):
    config = SimpleNamespace(mtp_impl=IMPL)
    conftest.pytest_collection_modifyitems(config, _items("test_graphs[eager]", "test_anywhere", "test_one[padded]"))
    assert not [w for w in recwarn if "skip key" in str(w.message)]
