"""The gate's pytest plugin: its options, hypothesis profiles, marks, fixtures and report.

Options (group ``mtp-harness``): ``--device`` (sim, cuda, npu or an installed backend), ``--impl``
(core or an adapter under ``mtp_harness.impls``; several, comma-separated, are the implementations of
one install in one session: each differential suite runs its own, each gate property runs once per
implementation, as its parameter), ``--divergences PATH`` (one implementation's own list of accepted
divergences); which implementation each test runs is ``tests/session_impls.py``'s.

Profiles (``--hypothesis-profile``): ``dev`` (quick, the default at a desk), ``ci`` (hypothesis' own
ci profile with more examples, derandomized; chosen when ``CI`` is set), ``adapter`` (the adapter envs'
sessions: a quarter of ``ci`` under ``CI``, else ``dev``'s), ``thorough``, ``mutate`` and ``fuzz`` for
``tox -e mutate`` / ``tox -e fuzz``, and ``broken`` for tests that expect a failure.

Marks: ``needs(capability)`` skips where the device lacks it; ``uses(feature)`` skips a property that
runs the implementation under test where that implementation lacks the feature
(``sim.impls.features``), with its reason; ``known_defect(id)`` marks the spec's strict expected
failure on a known defect. ``order`` and ``xdist_group`` are registered so that environments without
pytest-order or pytest-xdist still accept them. The gate's order (cheap, sensitive core properties
first, meta-tests on broken variants last) is in the ``order`` marks of the test modules.

What a session compared (drafts, steps, the values each divergence decided, the calls following each
known defect or its spec) is summed by ``GateSession`` and printed at the end; a known defect the
session saw only the spec followed for fails the session (``tests.checks.known_defects``).

The first failure ends the session under ``-x`` (``FirstFailureStops``): pytest-xdist stops each worker
after its current test, which for a property can be minutes of examples, or of shrinking a second
failure; here the other workers' properties stop at their next example, skipped with the test that
failed first named (and, where one had found a failure of its own, the command that replays it).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

from tests import loaded_by_workers, session_impls
from tests.session_impls import impl_at, impl_of, suite_of, tally_prefix

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]


def register_profiles() -> None:
    """The gate's hypothesis profiles, the ``ci`` one loaded when ``CI`` is set, else ``dev``.

    The example database keeps failures found by any run (a fuzz campaign included), which replay first
    in the next; ``HYPOTHESIS_DATABASE_DIR`` moves it where CI caches it. The ci profile reads it but
    never writes."""
    db = DirectoryBasedExampleDatabase(os.environ.get("HYPOTHESIS_DATABASE_DIR", ".hypothesis/examples"))
    common = {"print_blob": True, "suppress_health_check": _QUIET}
    settings.register_profile("dev", max_examples=25, deadline=None, database=db, **common)
    settings.register_profile(
        "ci", parent=settings.get_profile("ci"), max_examples=200, database=ReadOnlyDatabase(db), **common
    )
    settings.register_profile("thorough", max_examples=2000, deadline=None, database=db, **common)
    # mutation testing (tox -e mutate): the same few examples for every one of ~2000 mutants, nothing stored.
    settings.register_profile(
        "mutate", parent=settings.get_profile("dev"), max_examples=10, derandomize=True, database=None
    )
    # an adapter's session (tox.ini [adapter]): a quarter of the ci profile's examples. An upstream call
    # costs 10 to 100 times the core's, and the adapters' fixed cases, differential suites and broken
    # variants (their own budgets) do most of the catching (docs/PERFORMANCE.md); the core keeps the
    # budget its mutation score was measured with.
    ci = bool(os.environ.get("CI"))
    settings.register_profile(
        "adapter", parent=settings.get_profile("ci" if ci else "dev"), max_examples=50 if ci else 25
    )
    # long campaigns (tox -e fuzz): HypoFuzz stores what it finds in the shared database.
    settings.register_profile("fuzz", parent=settings.get_profile("dev"), database=db)
    # tests that expect a failure: stop at the first one (tests/meta/test_broken_caught.py adds derandomize).
    settings.register_profile(
        "broken",
        max_examples=300,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=_QUIET,
    )
    settings.load_profile("ci" if ci else "dev")


register_profiles()  # before hypothesis' own plugin reads --hypothesis-profile

MARKS = (
    "needs(capability): run only on devices whose attribute `capability` is true (else skip, with the reason)",
    "uses(feature): the implementation features (sim.impls.features) a property uses; "
    "where the implementation under test lacks one, skip with its reason",
    "order(n): position in the gate (pytest-order); ignored without it",
    "known_defect(id): the spec's expected failure on a known defect",
    "xdist_group(name): tests kept on one xdist worker (--dist loadgroup)",
    "touches_stand_ins: a test that calls the fake torch_npu's stand-ins on purpose (tests/checks/stand_ins.py)",
    "impl_params: the test parametrizes the implementations of a session of several itself, with each one's own params",
)


def pytest_addoption(parser):
    group = parser.getgroup("mtp-harness", "the MTP gate: device, implementation under test, its divergences")
    group.addoption(
        "--device",
        default="sim",
        help="device to run the proposer on: sim (CPU simulator, default), cuda, npu, or an installed backend",
    )
    group.addoption(
        "--impl",
        default="core",
        help="implementation under test: core (default), or an adapter registered under mtp_harness.impls; "
        "several, comma-separated, run in one session (the implementations of one install)",
    )
    group.addoption(
        "--divergences",
        metavar="PATH",
        help="the implementation's own list of accepted divergence ids (one per line); default: the harness's table",
    )


def pytest_configure(config):
    from devices import DeviceUnavailable, load_device

    for line in MARKS:
        config.addinivalue_line("markers", line)
    try:
        config.mtp_device = load_device(config.getoption("--device"))
    except DeviceUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    session_impls.configure(config)
    config.pluginmanager.register(GateSession(config), "mtp-gate-session")
    if config.option.maxfail:
        config.pluginmanager.register(FirstFailureStops(config), "mtp-first-failure-stops")


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    impls, device = config.mtp_impls, config.mtp_device
    under_test = (
        "; ".join(i.describe for i in impls.values())
        if impls is not None
        else f"{config.getoption('--impl')}, loaded by the workers"
    )
    lines = [
        f"device: {device.describe()}, implementation under test: {under_test}",
        f"hypothesis profile: {settings.get_current_profile_name()}, "
        f"seed: {seed if seed is not None else 'random per test'}",
    ]
    if impls is not None:
        lines.extend(loaded_by_workers.impl_lines(impls, config.mtp_absent, device.name))
    if session_impls.names(config) != ["core"]:
        lines.append("the gate's properties of the core alone (no impl fixture) are deselected: tox -e sim runs them")
    return lines


def pytest_generate_tests(metafunc):
    """In a session of several implementations, a gate property that takes ``impl`` runs once per
    implementation (its parameter: its id first), unless it parametrizes them itself (``impl_params``);
    a differential suite's tests run their own."""
    impls = getattr(metafunc.config, "mtp_impls", None) or {}
    if (
        len(impls) > 1
        and "impl" in metafunc.fixturenames
        and suite_of(metafunc.definition.path) is None
        and not metafunc.definition.get_closest_marker("impl_params")
    ):
        metafunc.parametrize("impl", list(impls), indirect=True)


def pytest_collection_modifyitems(config, items):
    """Under ``--impl`` other than the core, a gate property that never runs the implementation (no
    ``impl`` fixture: the core's own proposer, which ``tox -e sim`` checks) is deselected: nothing is
    run twice for the same question. So is the differential suite of an implementation the code under
    test has not (the header says why)."""
    impls = config.mtp_impls
    if impls is None or list(impls) == ["core"]:  # None: a worker without it collects nothing
        return
    dropped = {
        i
        for i in items
        if ("properties" in i.path.parts and "impl" not in i.fixturenames) or suite_of(i.path) in config.mtp_absent
    }
    if dropped:
        config.hook.pytest_deselected(items=[i for i in items if i in dropped])
        items[:] = [i for i in items if i not in dropped]


def pytest_runtest_setup(item):
    impl, device = impl_of(item), item.config.mtp_device
    if impl is not None and ("impl" in item.fixturenames or suite_of(item.path)):  # of the implementation under test
        reason = impl.lacking({f for mark in item.iter_markers("uses") for f in mark.args}, device.name)
        if reason:
            pytest.skip(f"{impl.name} on {device.name}: {reason}")
    for mark in item.iter_markers("needs"):
        for capability in mark.args:
            if not getattr(device, capability, False):
                pytest.skip(f"device {device.name} lacks {capability}")


def pytest_runtest_teardown(item):
    """A test's queued device work ends with it: an accelerator's asynchronous error (a device-side
    assert) is reported at the teardown of the test that caused it, not at some later test's kernel."""
    item.config.mtp_device.synchronize()


class GateSession:
    """What the session compared, summed from every test's report (on the controller under xdist: the
    reports carry it), and the known defects it found fixed."""

    def __init__(self, config):
        self.config = config
        self.compared: Counter = Counter()
        self.fixed_reported: set[str] = set()  # the fixed lines a test's report already carries
        self.fixed: list[str] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """A test's compared values become its JUnit properties; a known defect's spec that passes
        (XPASS strict) says what it means: the defect is fixed."""
        report = yield
        if call.when == "call":  # what this test compared (tests/checks/e2e_checks.py), of its implementation
            from tests.checks.e2e_checks import TALLY

            prefix = tally_prefix(self.config, impl_of(item))
            item.user_properties.extend(sorted((prefix + key, n) for key, n in TALLY.items()))
            report.user_properties = list(item.user_properties)
            TALLY.clear()
        mark = item.get_closest_marker("known_defect")
        if mark and report.when == "call" and report.failed and "XPASS(strict)" in str(report.longrepr):
            from tests.checks.known_defects import fixed_line

            defect = next(d for d in impl_of(item).divergences if d.id == mark.args[0])
            report.longrepr = fixed_line(defect)
        return report

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.compared.update({k: v for k, v in report.user_properties if isinstance(v, int)})
            if report.failed and str(report.longrepr).startswith("fixed: "):
                self.fixed_reported.add(str(report.longrepr))

    def pytest_sessionfinish(self, session):
        """A known defect the session saw only the spec followed for is fixed: the session fails."""
        if hasattr(self.config, "workerinput"):
            return  # a worker's share; the controller sums them
        from sim.impls.divergence import Kind
        from tests.checks.known_defects import verdicts

        impls, device = self.config.mtp_impls, self.config.mtp_device
        if impls is None:  # no worker got as far as loading them
            return
        # every known defect: those a rule models, and those only a differential pin shows (a kernel's access)
        for impl in impls.values():
            prefix = tally_prefix(self.config, impl)
            compared = Counter({k[len(prefix) :]: n for k, n in self.compared.items() if k.startswith(prefix)})
            self.fixed += verdicts([d for d in impl.in_force(device.name) if d.kind is Kind.DEFECT], compared)
        if self.fixed:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        """A green run says what it compared; a session that found a known defect fixed says that last
        (where its strict expected failure has not already said it)."""
        if self.compared:
            terminalreporter.section("compared with the reference")
            for key, value in sorted(self.compared.items()):
                terminalreporter.write_line(f"{key}: {value}")
        fixed = [line for line in self.fixed if line not in self.fixed_reported]
        if fixed:
            terminalreporter.section("known defects fixed", red=True)
            for line in fixed:
                terminalreporter.write_line(line, red=True)


class FirstFailureStops:
    """Under ``-x`` (``--maxfail``): once the session has as many failures as it allows, the properties
    still running on other workers stop at their next example (skipped, naming the failure that ended
    the session). The controller writes the failed test's id to a file its workers watch."""

    def __init__(self, config):
        self.config, self.failures = config, 0
        workerinput = getattr(config, "workerinput", None)
        if workerinput is None:  # the controller (or a session without workers)
            handle, path = tempfile.mkstemp(prefix="mtp_harness_stop_")
            os.close(handle)
            self.flag = Path(path)
            self.flag.write_text("")
        else:
            self.flag = Path(workerinput["mtp_stop_file"])

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        node.workerinput["mtp_stop_file"] = str(self.flag)

    def pytest_runtest_logreport(self, report):
        if hasattr(self.config, "workerinput") or not report.failed:
            return
        self.failures += 1
        if self.failures >= self.config.option.maxfail and not self.flag.read_text():
            self.flag.write_text(report.nodeid)

    def _stopped_by(self) -> str:
        try:
            return self.flag.read_text()
        except FileNotFoundError:  # the controller has ended the session and removed it
            return "a test on another worker"

    def pytest_runtest_setup(self, item):
        first = self._stopped_by()
        if first:
            pytest.skip(f"stopped: {first} failed first, and -x ends the session")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        hypothesis = getattr(getattr(item, "obj", None), "hypothesis", None)
        if hypothesis is None or getattr(hypothesis.inner_test, "_mtp_stops", False):
            return
        inner, failed = hypothesis.inner_test, []

        @functools.wraps(inner)
        def stopping(*args, **kwargs):
            first = self._stopped_by()
            if first:
                found = f"; it had found a failure of its own: replay with `pytest {item.nodeid}`" if failed else ""
                pytest.skip(f"stopped: {first} failed first, and -x ends the session{found}")
            try:
                return inner(*args, **kwargs)
            except Exception:
                failed.append(True)
                raise

        stopping._mtp_stops = True
        hypothesis.inner_test = stopping

    def pytest_unconfigure(self, config):
        if not hasattr(config, "workerinput"):
            self.flag.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def device(pytestconfig):
    """The ``Device`` chosen with ``--device``."""
    return pytestconfig.mtp_device


@pytest.fixture(scope="module")  # not per test: hypothesis' properties take it
def impl(request):
    """The ``Implementation`` this module's tests run (``impl_of``): the one ``--impl`` names, its
    differential suite's, or their parameter in a session of several."""
    return impl_at(request.config, request.path, getattr(request, "param", None))
