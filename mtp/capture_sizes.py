"""The sizes graphs are captured at, and how a batch is padded up to one.

Owned here, in one place, kept sorted ascending: padding picks the smallest
captured size that holds the batch (bug class 3: a list sorted the other way,
or copied stale, pads to sizes never captured).
"""

from __future__ import annotations

import bisect


class CaptureSizes:
    def __init__(self, sizes, limit: int):
        kept = sorted({int(s) for s in sizes if 0 < int(s) <= limit})
        if not kept:
            raise ValueError(f"capture_sizes={list(sizes)!r}: need at least one size in [1, {limit}]")
        self.sizes = tuple(kept)

    @classmethod
    def default(cls, limit: int) -> CaptureSizes:
        """1, 2, 4, 8, then every 8 up to ``limit``, as vLLM's default list does."""
        return cls([1, 2, 4] + list(range(8, limit + 1, 8)) + [limit], limit)

    def pad(self, n: int) -> int | None:
        """The smallest captured size >= n, or None when n exceeds them all (run eagerly)."""
        i = bisect.bisect_left(self.sizes, n)
        return self.sizes[i] if i < len(self.sizes) else None

    def __contains__(self, n: int) -> bool:
        return n in self.sizes

    def __iter__(self):
        return iter(self.sizes)

    def __repr__(self) -> str:
        return f"CaptureSizes{self.sizes}"
