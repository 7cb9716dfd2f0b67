"""Every known defect of the implementation under test is still there: the spec fails on it.

A defect is modelled so that the gate compares everything else (``Implementation.rules``), but
it never becomes the truth. For each defect in force, the gate's properties run under the spec
for that one behaviour (the implementation's rules with the defect's rule reverted, every other
divergence still in force, ``sim.impls.divergence.spec_for``) on what attention and the model are
given: a whole serving run (each step's metadata as the model reads it, and the drafts), and, for a
defect of the first pass's ``max_query_len``, that value as the input preparation hands it to the
attention builder, padded and unpadded (the one value handed there that no serving run compares; for
any other defect it would fail for a reason of its own, such as MRV2's missing unpadded path). Intermediates no kernel
reads (the first pass's ``accepted_seq_lens``, which a fix may lower later) are not the spec. They
run as a strict expected failure: XFAIL while the defect is there; the day a change fixes it the
spec holds, and the run fails with "fixed: ID no longer present; drop it from the list (FILE:LINE)"
until the list says so. The core has no known defects, so nothing is generated for it.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from sim.impls.divergence import spec_for
from sim.impls.features import Feature
from tests.checks import core_checks
from tests.checks.e2e_checks import check_implementation
from tests.strategies.batches import batch_cases
from tests.strategies.scenarios import scenarios

pytestmark = pytest.mark.order(2)  # whole serving runs

# Stop at the first counterexample (no shrinking: the failure is expected), the same examples every run.
SPEC_FAILS = settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def pytest_generate_tests(metafunc):
    """One test per known defect of each implementation under test (in a session of several, its
    implementation its parameter too, its id first)."""
    if "defect" not in metafunc.fixturenames:
        return
    impls, device = metafunc.config.mtp_impls, metafunc.config.mtp_device
    several = len(impls) > 1
    params = [
        pytest.param(
            *((name, d) if several else (d,)),
            id=f"{name}-{d.id}" if several else d.id,
            marks=[
                pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"known defect {d.id}: the spec fails"),
                pytest.mark.known_defect(d.id),
            ],
        )
        for name, impl in impls.items()
        for d in impl.defects(device.name)
    ]
    if not params:
        skip = pytest.mark.skip(reason=f"{', '.join(impls)} has no known defects")
        params = [pytest.param(*((next(iter(impls)), None) if several else (None,)), id="none", marks=skip)]
    if several:
        metafunc.parametrize(("impl", "defect"), params, indirect=["impl"])
    else:
        metafunc.parametrize("defect", params)


@pytest.mark.impl_params
def test_the_spec_fails_on_each_known_defect(device, impl, defect):
    """Under the spec for ``defect`` alone, some serving run must differ from the reference."""
    spec = spec_for(impl.rules, defect)
    # Padded or unpadded, drawn; padded only where the implementation has no unpadded path (MRV2), which
    # would fail the spec for a reason of its own and hide a fix.
    unpadded = impl.lacking({Feature.UNPADDED}, device.name) is None

    @SPEC_FAILS
    @given(case=batch_cases(), scenario=scenarios(padded=None if unpadded else True, max_iterations=10))
    def prop(case, scenario):
        if "max_query_len_compacted" in defect.rule:  # the one value no serving run compares
            for padded in (True, False):
                core_checks.check_max_query_len(impl.ops, case, padded, device, spec)
        scenario = dataclasses.replace(scenario, **defect.setting)  # where the default scenario hides it
        check_implementation(impl, scenario, device, f"spec-{defect.id}", rules=spec)

    prop()
