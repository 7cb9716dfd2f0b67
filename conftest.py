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

import pytest  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase  # noqa: E402

pytest_plugins = ["pytester"]  # tests/test_gate_config.py runs a throwaway hanging test

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]
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
)  # used by tests that expect a failure: stop at the first one (tests/test_broken_caught.py adds derandomize)
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


def pytest_configure(config):
    from devices import DeviceUnavailable, load_device

    config.addinivalue_line(
        "markers",
        "needs(capability): run only on devices whose attribute `capability` is true (else skip, with the reason)",
    )
    config.addinivalue_line("markers", "order(n): position in the gate (pytest-order); ignored without it")
    config.addinivalue_line("markers", "xdist_group(name): tests kept on one xdist worker (--dist loadgroup)")
    from sim.impls import ImplementationUnavailable, load_implementation

    try:
        config.mtp_device = load_device(config.getoption("--device"))
        config.mtp_impl = load_implementation(config.getoption("--impl"))
    except (DeviceUnavailable, ImplementationUnavailable) as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_report_header(config):
    seed = config.getoption("hypothesis_seed", None)
    return [
        f"device: {config.mtp_device.describe()}, implementation under test: {config.mtp_impl.describe}",
        f"hypothesis profile: {settings._current_profile}, seed: {seed if seed is not None else 'random per test'}",
    ]


def pytest_runtest_setup(item):
    impl = item.config.mtp_impl
    reason = impl.skips.get(item.name) or impl.skips.get(item.originalname)  # one parametrization, or all
    if reason:
        pytest.skip(f"{impl.name}: {reason}")
    device = item.config.mtp_device
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
