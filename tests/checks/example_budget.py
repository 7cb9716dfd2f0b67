"""How many examples a costly property draws: a share of the profile's ``max_examples``.

Whole serving runs and multi-process cases cost 10 to 1000 times a single
call, so those properties take a share of the profile's count (the ci
profile's 200 become 100, 40, 25, ...). The share never falls below
``at_least``: 10, the ``mutate`` profile's own count, by default, so that
every mutant meets ten cases; a share of 10 often draws only batches that no
padding or split reaches.
"""

from __future__ import annotations

from hypothesis import settings


def share(divisor: int, at_least: int = 10) -> settings:
    """``max_examples // divisor`` of the loaded profile, and at least ``at_least``."""
    return settings(max_examples=max(at_least, settings.default.max_examples // divisor))
