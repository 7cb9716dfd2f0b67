"""A method of the code under test with lines of its own source changed: the patch a pull request makes.

Some fixes are a line inside a long method (0.13.0's ``slot_mapping += 1`` in ``MtpProposer._propose``).
``edited`` compiles the installed method's source with each edit applied, in its own module's
namespace, so everything else that runs is the version under test, not a copy kept here. An edit
whose old text is not found exactly once is refused by name: a fix written for another version.
"""

from __future__ import annotations

import functools
import inspect
import textwrap


def edited(method, *edits: tuple[str, str]):
    """``method`` recompiled from its installed source with each ``(old, new)`` edit applied (the text as
    the file has it, indented)."""
    source = inspect.getsource(method)
    for old, new in edits:
        found = source.count(old)
        if found != 1:
            raise ValueError(f"{method.__qualname__}: {old!r} found {found} times in its source, not once")
        source = source.replace(old, new)
    source = textwrap.dedent(source)
    namespace: dict = {}
    exec(compile(source, inspect.getsourcefile(method), "exec"), method.__globals__, namespace)  # noqa: S102
    return functools.wraps(method)(namespace[method.__name__])
