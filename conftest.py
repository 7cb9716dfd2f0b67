"""pytest setup: the ``--device`` option, hypothesis profiles, the report header.

Profiles: ``dev`` (quick, the default at a desk), ``ci`` (hypothesis' own ci
profile with more examples, derandomized; chosen automatically when ``CI`` is
set), ``thorough``, and ``mutate`` / ``fuzz`` for ``tox -e mutate`` / ``tox -e
fuzz``. Pick one with ``--hypothesis-profile``.

Order of the gate (pytest-order, ``order`` marks per module): the cheap,
sensitive core properties first, then calls in sequence and the device
contract, then whole serving runs, then the multi-process PCP suite, and the
meta-tests on broken variants last, so a broken core fails within seconds.
The ``order`` and ``xdist_group`` marks are also registered here, so
environments without those plugins (``tox -e vllm``) still accept them.
"""

from __future__ import annotations

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see devices/accelerator.py

import warnings  # noqa: E402
from collections import Counter  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase  # noqa: E402

pytest_plugins = ["pytester"]  # tests/harness/test_gate_config.py runs a throwaway hanging test

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
_COMPARED: Counter = Counter()  # this session's, from every test's JUnit properties
_FIXED_REPORTED: set = set()  # the fixed lines a test's report already carries (a strict xfail that passed)
# The example database: failures found by any run (a fuzz campaign included) replay first in the next.
# HYPOTHESIS_DATABASE_DIR moves it where CI caches it; the ci profile reads it but never writes.
_DB = DirectoryBasedExampleDatabase(os.environ.get("HYPOTHESIS_DATABASE_DIR", ".hypothesis/examples"))
settings.register_profile(
    "dev", max_examples=25, deadline=None, print_blob=True, suppress_health_check=_QUIET, database=_DB
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=200,
    print_blob=True,
    suppress_health_check=_QUIET,
    database=ReadOnlyDatabase(_DB),
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, print_blob=True, suppress_health_check=_QUIET, database=_DB
)
# mutation testing (tox -e mutate): the same few examples for every one of ~2000 mutants, nothing stored.
settings.register_profile(
    "mutate", parent=settings.get_profile("dev"), max_examples=10, derandomize=True, database=None
)
# long campaigns (tox -e fuzz): HypoFuzz stores what it finds in the shared database.
settings.register_profile("fuzz", parent=settings.get_profile("dev"), database=_DB)
settings.register_profile(
    "broken",
    max_examples=300,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=_QUIET,
)  # used by tests that expect a failure: stop at the first one (tests/meta/test_broken_caught.py adds derandomize)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default="sim",
        help="device to run the proposer on: sim (CPU simulator, default), cuda, npu, or an installed backend",
    )
    parser.addoption(
        "--impl",
        default="core",
        help="implementation under test: core (default), or an adapter registered under mtp_harness.impls",
    )
    parser.addoption(
        "--divergences",
        metavar="PATH",
        help="the implementation's own list of accepted divergence ids (one per line); default: the harness's table",
    )


def pytest_configure(config):
    from devices import DeviceUnavailable, load_device

    config.addinivalue_line(
        "markers",
        "needs(capability): run only on devices whose attribute `capability` is true (else skip, with the reason)",
    )
    config.addinivalue_line("markers", "order(n): position in the gate (pytest-order); ignored without it")
    config.addinivalue_line("markers", "known_defect(id): the spec's expected failure on a known defect")
    config.addinivalue_line("markers", "xdist_group(name): tests kept on one xdist worker (--dist loadgroup)")
    from sim.impls import ImplementationUnavailable, load_implementation, read_divergence_list

    try:
        config.mtp_device = load_device(config.getoption("--device"))
        config.mtp_impl = load_implementation(config.getoption("--impl"))
    except (DeviceUnavailable, ImplementationUnavailable) as exc:
        raise pytest.UsageError(str(exc)) from None
    listed = config.getoption("--divergences")
    if listed:
        try:
            ids = read_divergence_list(listed)  # id -> PATH:LINE
        except OSError as exc:
            raise pytest.UsageError(f"--divergences {listed}: {exc.strerror}") from None
        config.mtp_impl, unknown = config.mtp_impl.accepting(ids)
        for entry in unknown:
            config.issue_config_time_warning(
                pytest.PytestConfigWarning(
                    f"--divergences {listed}: {entry!r} matches no divergence of {config.mtp_impl.name}"
                ),
                stacklevel=2,
            )


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    impl, device = config.mtp_impl, config.mtp_device
    lines = [
        f"device: {device.describe()}, implementation under test: {impl.describe}",
        f"hypothesis profile: {settings.get_current_profile_name()}, "
        f"seed: {seed if seed is not None else 'random per test'}",
    ]
    in_force = impl.in_force(device.name)
    if in_force:
        lines.append(f"divergences in force ({len(in_force)}): " + ", ".join(d.label() for d in in_force))
    return lines


def _property_names(root) -> set[str]:
    """The test functions the gate's property modules define (read, not imported)."""
    import ast

    return {
        node.name
        for path in (root / "tests" / "properties").glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def pytest_collection_modifyitems(config, items):
    """An implementation's skip key that names no property of the gate is a stale entry: warn, naming it."""
    impl = config.mtp_impl
    if not impl.skips or not any("properties" in item.path.parts for item in items):
        return
    defined = _property_names(config.rootpath)
    for key in sorted(k for k in impl.skips if k.split("[")[0] not in defined):
        warnings.warn(
            pytest.PytestWarning(f"{impl.name}: skip key {key!r} names no property of the gate"), stacklevel=1
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A known defect's spec that passes (XPASS strict) says what it means: the defect is fixed."""
    report = yield
    if call.when == "call":  # what this test compared (tests/checks/e2e_checks.py): its JUnit properties
        from tests.checks.e2e_checks import TALLY

        item.user_properties.extend(sorted(TALLY.items()))
        report.user_properties = list(item.user_properties)
        TALLY.clear()
    mark = item.get_closest_marker("known_defect")
    if mark and report.when == "call" and report.failed and "XPASS(strict)" in str(report.longrepr):
        from tests.checks.known_defects import fixed_line

        defect = next(d for d in item.config.mtp_impl.divergences if d.id == mark.args[0])
        report.longrepr = fixed_line(defect)
    return report


def pytest_runtest_logreport(report):
    """Sum what every test compared (on the controller under xdist: the reports carry it)."""
    if report.when == "call":
        _COMPARED.update({k: v for k, v in report.user_properties if isinstance(v, int)})
        if report.failed and str(report.longrepr).startswith("fixed: "):
            _FIXED_REPORTED.add(str(report.longrepr))


def pytest_sessionfinish(session):
    """A known defect the session saw only the spec followed for is fixed: the session fails, saying so
    once (where its strict expected failure has not already said it)."""
    if hasattr(session.config, "workerinput"):
        return  # a worker's share; the controller sums them
    from tests.checks.known_defects import verdicts

    impl, device = session.config.mtp_impl, session.config.mtp_device
    session.config.mtp_fixed = verdicts(impl.defects(device.name), _COMPARED)
    if session.config.mtp_fixed:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    """A green run says what it compared: drafts, steps, and the values each divergence decided; a
    session that found a known defect fixed says that last."""
    if _COMPARED:
        terminalreporter.section("compared with the reference")
        for key, value in sorted(_COMPARED.items()):
            terminalreporter.write_line(f"{key}: {value}")
    fixed = [line for line in getattr(terminalreporter.config, "mtp_fixed", []) if line not in _FIXED_REPORTED]
    if fixed:
        terminalreporter.section("known defects fixed", red=True)
        for line in fixed:
            terminalreporter.write_line(line, red=True)


def pytest_runtest_setup(item):
    impl = item.config.mtp_impl
    device = item.config.mtp_device
    reason = impl.skip_for((item.name, item.originalname), device.name)  # one parametrization, or all
    if reason:
        pytest.skip(f"{impl.name} on {device.name}: {reason}")
    for mark in item.iter_markers("needs"):
        for capability in mark.args:
            if not getattr(device, capability, False):
                pytest.skip(f"device {device.name} lacks {capability}")


@pytest.fixture(scope="session")
def device(pytestconfig):
    """The ``Device`` chosen with ``--device``."""
    return pytestconfig.mtp_device


@pytest.fixture(scope="session")
def impl(pytestconfig):
    """The ``Implementation`` chosen with ``--impl``."""
    return pytestconfig.mtp_impl
