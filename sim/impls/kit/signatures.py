"""What a generation's signature says: the generations of one upstream differ in a parameter or two,
and an adapter asks the method itself instead of keeping a table of versions."""

from __future__ import annotations

import inspect


def takes(method, name: str) -> bool:
    """Whether ``method`` (or the method it wraps) has a parameter called ``name``."""
    return name in inspect.signature(method).parameters
