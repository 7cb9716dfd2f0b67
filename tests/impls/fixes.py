"""What the adapters' fixes of known defects share (each adapter's ``defect_fixes`` holds its own).

- ``edited``: a method of the code under test with lines of its own source changed, the patch a pull
  request makes, where a fix is a line inside a long method (0.13.0's ``slot_mapping += 1`` in
  ``MtpProposer._propose``). It compiles the installed method's source with each edit applied, in
  its own module's namespace, so everything else that runs is the version under test, not a copy
  kept here. An edit whose old text is not found exactly once is refused by name: a fix written for
  another version.
- ``max_query_len_compacted``: ``unpadded-max-query-len``, which vLLM, vllm-ascend 0.23.0 and 0.13.0
  share: ``prepare_inputs`` reports the longest query of the compacted batch (applied twice, the same).
- ``skip_unless_present``: a fix variant applies only where the checkout under test has the defect.
"""

from __future__ import annotations

import functools
import inspect
import textwrap

import pytest


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


def max_query_len_compacted(prepare):
    """``prepare_inputs`` (returning the metadata first) whose metadata reports the compacted batch's longest query."""

    @functools.wraps(prepare)
    def fixed(self, *args, **kwargs):
        cad, *rest = prepare(self, *args, **kwargs)
        lens = cad.query_start_loc_cpu[1:] - cad.query_start_loc_cpu[:-1]
        cad.max_query_len = int(lens.max()) if lens.numel() else 0
        return (cad, *rest)

    return fixed


def skip_unless_present(defect: str, report) -> None:
    """Skip, naming why, where the implementation under test no longer has ``defect`` (a checkout that
    fixed it): ``report``, a serving run under rules that model it, never followed the defect. A fix
    variant on top of a fixed implementation would fix it twice."""
    from sim.serving.run import DEFECT

    if not report.followed[(defect, DEFECT)]:
        pytest.skip(f"{defect}: the implementation under test does not have it (its runs follow the spec)")
