"""Which implementations a session runs (``--impl``, one or several of one install), and which one
each test runs: its ``impl`` parameter in a session of several, its differential suite's
(``tests/impls/NAME/``), or the session's one. Loaded in-process, or by xdist's workers
(``tests/loaded_by_workers.py``); one the code under test has not is left out, said in the header."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import loaded_by_workers


def names(config) -> list[str]:
    """The implementations ``--impl`` names, in its order."""
    return [name.strip() for name in config.getoption("--impl").split(",") if name.strip()]


def configure(config) -> None:
    """The session's implementations: refused at once where ``--impl`` names none, or ``--divergences``
    (one implementation's list) meets several; loaded here, or, on xdist's controller, left to the
    workers (``config.mtp_impls`` None until the first hands them over)."""
    asked = names(config)
    if not asked:
        raise pytest.UsageError(f"--impl {config.getoption('--impl')!r}: names no implementation")
    listed = config.getoption("--divergences")
    if listed and len(asked) > 1:
        raise pytest.UsageError(
            f"--divergences {listed}: one implementation's list, and --impl names "
            f"{len(asked)} ({','.join(asked)}): run the one it lists alone"
        )
    config.mtp_absent = {}  # the implementations the code under test has not: name -> why
    if loaded_by_workers.deferred(config):
        _readable(listed)
        config.mtp_impls = None  # what the first worker that is ready loaded (loaded_by_workers)
        config.pluginmanager.register(loaded_by_workers.Controller(config), "mtp-impl-loaded-by-workers")
    else:
        _load(config, asked)


def _readable(listed: str | None) -> None:
    """A ``--divergences`` file that cannot be read stops the session at once (on xdist's controller, before
    any worker starts), in one line naming it."""
    if listed:
        try:
            Path(listed).read_bytes()
        except OSError as exc:
            raise pytest.UsageError(f"--divergences {listed}: {exc.strerror}") from None


def _load(config, names: list[str]) -> None:
    """The implementations ``--impl`` names (with ``--divergences``) loaded in this process, by name; on a
    worker, handed over to the controller, with the reason if one cannot be loaded. One the code under
    test has not (``NotInThisCheckout``, a fact of it) is left out, said in the header; where none is
    left, the session ends with why, exit 0."""
    from sim.impls import ImplementationUnavailable, NotInThisCheckout, load_implementation

    worker = hasattr(config, "workerinput")
    listed, unknown = config.getoption("--divergences"), []
    _readable(listed)
    impls, absent = {}, {}
    for name in names:
        try:
            impls[name] = load_implementation(name)
        except NotInThisCheckout as exc:  # a fact of the code under test: no failure of the gate
            absent[name] = str(exc)
        except ImplementationUnavailable as exc:
            if not worker:
                raise pytest.UsageError(str(exc)) from None
            config.mtp_impls = None
            loaded_by_workers.refuse(config, str(exc))
            return
    if not impls:
        if not worker:
            pytest.exit("; ".join(absent.values()), returncode=pytest.ExitCode.OK)
        config.mtp_impls = None
        loaded_by_workers.refuse(config, "; ".join(absent.values()), pytest.ExitCode.OK)
        return
    if listed:  # one implementation's (configure)
        ((name, impl),) = impls.items()
        impls[name], unknown = impl.accepting_list(listed)
    config.mtp_impls, config.mtp_absent = impls, absent
    if worker:
        loaded_by_workers.hand_over(config, impls, absent, unknown)
        return
    for entry in unknown:  # only where listed: of the one implementation
        (impl,) = impls.values()
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(loaded_by_workers.unknown_line(listed, impl.name, entry)), stacklevel=3
        )


def suite_of(path: Path) -> str | None:
    """The implementation whose differential suite ``path`` is in (``tests/impls/NAME/...``), or None."""
    parts = path.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i - 1] == "tests" and parts[i] == "impls":
            return parts[i + 1] if i + 2 < len(parts) else None
    return None


def impl_of(item):
    """The ``Implementation`` a test runs, or None (none loaded, or the test is of none): its ``impl``
    parameter in a session of several, its differential suite's, or the session's one."""
    return impl_at(item.config, item.path, getattr(getattr(item, "callspec", None), "params", {}).get("impl"))


def impl_at(config, path: Path, param=None):
    """``impl_of`` a test of ``path`` whose ``impl`` parameter is ``param`` (None: it has none)."""
    impls = config.mtp_impls or {}
    if isinstance(param, str) and param in impls:  # not a test's own parameter of that name
        return impls[param]
    name = suite_of(path)
    if name in impls:
        return impls[name]
    return next(iter(impls.values())) if len(impls) == 1 else None


def tally_prefix(config, impl) -> str:
    """What names a test's compared values as its implementation's in a session of several ("NAME: ")."""
    return f"{impl.name}: " if impl is not None and len(config.mtp_impls or ()) > 1 else ""
