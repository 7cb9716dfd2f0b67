"""Every broken variant is caught by some meta-test, so no property loses its teeth unseen.

A broken variant is a public class or function defined in a ``tests/meta/broken_*.py`` module
(``broken_gate`` is the pytest plugin that swaps them in, not a variant). A meta-test catches it
when the variant object is one of its parametrize values; the meta-tests name their variants that
way, by object, so that this check reads them without running anything and whatever ``-k`` selects.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import tests.meta
from tests.checks.parametrized import leaves

pytestmark = pytest.mark.order(0)  # cheap: beside the core properties


def _modules(prefix: str):
    for info in pkgutil.iter_modules(tests.meta.__path__):
        if info.name.startswith(prefix) and info.name != "broken_gate":
            yield importlib.import_module(f"tests.meta.{info.name}")


def broken_variants() -> set:
    """Every variant the broken modules define."""
    return {
        obj
        for module in _modules("broken_")
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__ == module.__name__
    }


def parametrized_variants() -> set:
    """Every object a meta-test of ``tests/meta/test_*.py`` is parametrized with."""
    found = set()
    for module in _modules("test_"):
        for _, fn in inspect.getmembers(module, inspect.isfunction):
            for mark in getattr(fn, "pytestmark", []):
                if mark.name == "parametrize":
                    for value in mark.args[1]:
                        found.update(v for v in leaves(value) if inspect.isclass(v) or inspect.isfunction(v))
    return found


def test_every_broken_variant_is_caught_by_a_meta_test():
    variants = broken_variants()
    assert len(variants) > 40, f"only {len(variants)} variants found: is tests/meta/broken_*.py read?"
    uncaught = sorted(f"{v.__module__}:{v.__name__}" for v in variants - parametrized_variants())
    assert not uncaught, f"broken variants no meta-test is parametrized with: {uncaught}"


def test_a_variant_left_out_is_reported(monkeypatch):
    """The check above fails when a meta-test loses its variant (here: one more variant, never used)."""
    from tests.meta import broken_ops

    class NeverUsed(broken_ops.SlotPlusOne):
        pass

    NeverUsed.__module__ = broken_ops.__name__
    monkeypatch.setattr(broken_ops, "NeverUsed", NeverUsed, raising=False)
    with pytest.raises(AssertionError, match="broken_ops:NeverUsed"):
        test_every_broken_variant_is_caught_by_a_meta_test()
