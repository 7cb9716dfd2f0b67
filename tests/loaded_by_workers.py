"""Under pytest-xdist the implementation under test is loaded by the workers, never by the controller.

Loading an adapter imports its upstream (vLLM and vllm-ascend: about 10 s of one core, twice that in a
fresh env, which compiles their bytecode), and every worker loads it anyway to run its tests. The
controller runs none: it needs only what the report says of the implementation (its description, the
divergences in force, the ``--divergences`` entries that match none) and the known defects its verdict
reads (``GateSession``). So it leaves the loading to the workers, and each session's verdict starts
that much sooner (``docs/PERFORMANCE.md``).

Each worker hands over what it loaded (``hand_over``: a pickle in a file the controller names, as
``FirstFailureStops`` names its stop file); the controller reads it when the first worker is ready and
prints it where the report header would. A worker that cannot load the implementation, or cannot change
the code under test as a session plugin asks (``tests/impls/fixes.py``), hands over the reason instead
(``refuse``) and collects nothing, and the controller ends the session with that one line and exit 4,
as an in-process session's usage error does: never a page of errors or skips; where the checkout has no
such implementation, as a measured fact of it (``sim.impls.NotInThisCheckout``), exit 0. A session
without workers loads in-process, as before.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

import pytest

KEY = "mtp_impl_file"  # workerinput: where a worker hands over what it loaded


def deferred(config) -> bool:
    """Whether this process is xdist's controller, which leaves loading the implementation to its workers:
    xdist's own condition for a distributed session (a ``--dist`` mode and workers to run it, not a
    ``--collect-only``, which xdist runs in-process)."""
    if hasattr(config, "workerinput") or config.getoption("collectonly"):
        return False
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


def summary(impl):
    """What the controller needs of ``impl`` (an ``Implementation``): its name, description, divergences
    and the list they were read from; none of its upstream's objects."""
    from sim.impls import Implementation

    return Implementation(
        impl.name,
        None,
        type(None),
        divergences=impl.divergences,
        describe=impl.describe,
        divergence_list=impl.divergence_list,
    )


def hand_over(config, impls: dict, absent: dict, unknown=()) -> None:
    """On a worker: ``impls`` (the ``Implementation``s it loaded, by name), the ones the code under test
    has not (``absent``: name -> why) and the ``--divergences`` entries that match none of its divergences,
    for the controller."""
    kept = {name: summary(impl) for name, impl in impls.items()}
    _write(Path(config.workerinput[KEY]), config, (kept, dict(absent), list(unknown)))


def refuse(config, reason: str, code: pytest.ExitCode = pytest.ExitCode.USAGE_ERROR) -> None:
    """On a worker: the session cannot run here, for ``reason`` (the implementation could not be loaded, or
    the code under test could not be changed as asked); the worker collects nothing, and the controller
    ends the session with ``reason`` and ``code`` (OK where the checkout has no such implementation)."""
    _write(Path(config.workerinput[KEY] + ".refused"), config, (reason, code))
    config.pluginmanager.register(CollectsNothing(), "mtp-collects-nothing")


def _write(path: Path, config, data) -> None:
    part = path.with_name(f"{path.name}.{config.workerinput['workerid']}")
    part.write_bytes(pickle.dumps(data))
    os.replace(part, path)  # whole or not at all: every worker writes the same


class CollectsNothing:
    """A worker without the implementation: its tests are not collected (the controller names why)."""

    def pytest_ignore_collect(self, collection_path, config):
        return True


class Controller:
    """The controller's side: names the file, reads it when the first worker is ready, and prints what
    the header would say of the implementation (or ends the session with why it could not be loaded)."""

    def __init__(self, config):
        self.config = config
        handle, path = tempfile.mkstemp(prefix="mtp_harness_impl_")
        os.close(handle)
        self.path = Path(path)
        self.refused = Path(f"{path}.refused")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput[KEY] = str(self.path)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodeready(self, node):
        if self.refused.exists():
            reason, code = pickle.loads(self.refused.read_bytes())
            pytest.exit(reason, returncode=code)
        if self.config.mtp_impls is not None:
            return
        impls, self.config.mtp_absent, unknown = pickle.loads(self.path.read_bytes())
        self.config.mtp_impls = impls
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not reporter.showheader or reporter.no_header:
            return
        reporter.ensure_newline()
        reporter.write_line(f"implementation under test: {'; '.join(i.describe for i in impls.values())}")
        for line in impl_lines(impls, self.config.mtp_absent, self.config.mtp_device.name):
            reporter.write_line(line)
        listed = self.config.getoption("--divergences")
        for entry in unknown:
            reporter.write_line(unknown_line(listed, next(iter(impls.values())).name, entry), yellow=True)

    def pytest_unconfigure(self, config):
        self.path.unlink(missing_ok=True)
        self.refused.unlink(missing_ok=True)


def impl_lines(impls: dict, absent: dict, device: str) -> list[str]:
    """What the report says of each of ``impls``' divergences in force on ``device`` (nothing where none
    is; each line named by its implementation in a session of several), and of the implementations the
    code under test has not (``absent``: name -> why)."""
    lines = []
    for name, impl in impls.items():
        in_force = impl.in_force(device)
        if in_force:
            named = f"{name}: " if len(impls) > 1 else ""
            lines.append(f"{named}divergences in force ({len(in_force)}): " + ", ".join(d.label() for d in in_force))
    return lines + [f"not run: {why}" for why in absent.values()]


def unknown_line(listed: str, name: str, entry: str) -> str:
    """The warning for an ``entry`` of the ``--divergences`` file ``listed`` that matches none of the
    divergences of the implementation ``name``."""
    return f"--divergences {listed}: {entry!r} matches no divergence of {name}"
