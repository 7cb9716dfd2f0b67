"""Factories found by name, built in or from an entry-point group, imported only when asked for."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points


def import_object(spec: str):
    """The object named by ``"package.module:attr"``."""
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def registry(group: str, builtin: dict[str, str]) -> dict[str, str]:
    """name -> "module:attr": the built-in ones, then those installed under ``group``."""
    found = dict(builtin)
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep.value)
    return found


def load_factory(group: str, builtin: dict[str, str], name: str, unavailable):
    """The factory registered as ``name``; ``unavailable(name, cause)`` is raised otherwise."""
    known = registry(group, builtin)
    if name not in known:
        raise unavailable(name, f"unknown; known: {', '.join(sorted(known))}")
    try:
        return import_object(known[name])
    except ImportError as exc:
        raise unavailable(name, f"cannot import {known[name]}: {exc}") from exc
