"""What the CLI's commands share about bad input: one line naming it, exit status 2."""

from __future__ import annotations


class UsageError(ValueError):
    """A bad argument or file: one line, exit status 2."""


def checked(make, *args, **kwargs):
    """A scenario, or ``UsageError`` naming the field a bad file or option combination breaks (before any run)."""
    try:
        return make(*args, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
