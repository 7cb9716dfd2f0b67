"""What the adapters' fixes of known defects share (each adapter's ``defect_fixes`` holds its own).

- ``edited``: a method of the code under test with lines of its own source changed, the patch a pull
  request makes, where a fix is a line inside a long method (0.13.0's ``slot_mapping += 1`` in
  ``MtpProposer._propose``). It compiles the installed method's source with each edit applied, in
  its own module's namespace, so everything else that runs is the version under test, not a copy
  kept here. An edit whose old text is not found exactly once is refused by name: a fix written for
  another version. Edits of an edited method compose (two fixes of one long method). ``edited_module`` does the same for a whole module (a file of Triton kernels), and
  ``use_edited_module`` hands the edited one's names to a module that imported them.
- ``max_query_len_compacted``: ``unpadded-max-query-len``, which vLLM, vllm-ascend 0.23.0 and 0.13.0
  share: ``prepare_inputs`` reports the longest query of the compacted batch (applied twice, the same).
- ``skip_unless_present``: a fix variant applies only where the checkout under test has the defect.
- ``fix_method``, ``session_plugin``: a fix applied to a proposer's class, in a test or for a session.
- ``defining_class``: the class of a proposer's MRO that defines a method, where a fix or a break goes.
- ``assert_max_query_len_fix_holds``: the in-process check of the shared ``max_query_len`` fix.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import re
import textwrap
import types

import pytest

from tests import loaded_by_workers


def edited(method, *edits: tuple[str, str]):
    """``method`` recompiled from its installed source with each ``(old, new)`` edit applied (the text as
    the file has it, indented)."""
    source = _source(method)
    for old, new in edits:
        found = source.count(old)
        if found != 1:
            raise ValueError(f"{method.__qualname__}: {old!r} found {found} times in its source, not once")
        source = source.replace(old, new)
    return _recompiled(method, source)


def _source(method) -> str:
    """``method``'s source: the edited text where an edit made it (so that edits compose), else its file's."""
    return getattr(method, "edited_source", None) or inspect.getsource(method)


def _recompiled(method, source: str):
    namespace: dict = {}
    original = inspect.unwrap(method)  # the source read is the wrapped function's: so are its globals
    exec(compile(textwrap.dedent(source), inspect.getsourcefile(method), "exec"), original.__globals__, namespace)  # noqa: S102
    recompiled = functools.wraps(method)(namespace[method.__name__])
    recompiled.edited_source = source  # after wraps, which copies the method's own attributes over
    return recompiled


def edited_everywhere(method, pattern: str, replace):
    """``method`` recompiled from its installed source with every match of ``pattern`` (a regular
    expression) replaced by ``replace`` (``re.sub``'s), where the same lines sit at other indents in the
    generations; raises if nothing matches."""
    source, found = re.subn(pattern, replace, _source(method))
    if not found:
        raise ValueError(f"{method.__qualname__}: {pattern!r} matches nothing in its source")
    return _recompiled(method, source)


def edited_module(module, pattern: str, replace):
    """A copy of ``module`` recompiled from its installed source with every match of ``pattern`` (a
    regular expression) replaced by ``replace`` (``re.sub``'s); its source is kept in ``linecache``
    under ``<edited FILE>``, where Triton's JIT reads a kernel's source. Raises if nothing matches."""
    source, found = re.subn(pattern, replace, inspect.getsource(module))
    if not found:
        raise ValueError(f"{module.__name__}: {pattern!r} matches nothing in its source")
    filename = f"<edited {module.__file__}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    copy = types.ModuleType(module.__name__)
    copy.__file__ = filename
    exec(compile(source, filename, "exec"), copy.__dict__)  # noqa: S102
    return copy


def use_edited_module(monkeypatch, module, user, pattern: str, replace) -> None:
    """``user`` (a module that imported names from ``module``) given those names from
    ``edited_module(module, pattern, replace)`` instead, for the test or the session."""
    edited = edited_module(module, pattern, replace)
    for name, value in list(vars(user).items()):
        if value is not None and getattr(module, name, None) is value:
            monkeypatch.setattr(user, name, getattr(edited, name))


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
    from sim.serving.checker import DEFECT

    if not report.followed[(defect, DEFECT)]:
        pytest.skip(f"{defect}: the implementation under test does not have it (its runs follow the spec)")


def fix_method(fixes: dict, env: str, what: str, name: str, proposer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Apply the fix ``name`` of ``fixes`` (name -> (defect, method, fix)) to the class of ``proposer``
    that defines the method; an unknown name is a usage error naming ``env`` and the names known."""
    if name not in fixes:
        raise pytest.UsageError(f"{env}={name!r}: not a fixed {what}; known: {', '.join(fixes)}")
    _, method, fixing = fixes[name]
    cls = defining_class(proposer, method)
    monkeypatch.setattr(cls, method, fixing(getattr(cls, method)))


def defining_class(proposer, method: str) -> type:
    """The class of ``proposer``'s MRO that defines ``method`` (where a fix or a break of it must go)."""
    return next(c for c in type(proposer).__mro__ if method in vars(c))


def session_plugin(env: str, apply):
    """A ``pytest_configure`` that changes the code under test for the whole session (on every xdist
    worker; the controller runs none of it) with ``apply(name, monkeypatch)`` when the environment variable
    ``env`` names a change. A change a worker refuses ends the session with its reason
    (``tests/loaded_by_workers.py``)."""

    def pytest_configure(config: pytest.Config) -> None:
        name = os.environ.get(env)
        if not name or loaded_by_workers.deferred(config):
            return
        patch = pytest.MonkeyPatch()
        config.add_cleanup(patch.undo)
        try:
            apply(name, patch)
        except pytest.UsageError as exc:
            if not hasattr(config, "workerinput"):
                raise
            loaded_by_workers.refuse(config, str(exc))

    return pytest_configure


def assert_max_query_len_fix_holds(ops, rules, spec, device) -> None:
    """``unpadded-max-query-len`` fixed: its spec holds on the first pass's ``max_query_len``, padded and
    unpadded, and the single-call check under the implementation's ``rules`` accepts it."""
    from hypothesis import HealthCheck, given, settings

    from tests.checks import core_checks
    from tests.strategies.batches import batch_cases

    @settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(case=batch_cases())
    def holds(case):
        for padded in (True, False):
            core_checks.check_max_query_len(ops, case, padded, device, spec)
            core_checks.check_first_pass(ops, case, padded, device, rules)

    holds()
