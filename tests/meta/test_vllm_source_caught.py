"""Every check of the main-verified leg has been seen failing: each variant of
tests/meta/broken_vllm_source.py, put in place of the recipe's function it breaks, fails the
check of tests/harness/test_vllm_source.py that the real recipe passes.
"""

from __future__ import annotations

import pytest

from sim.impls.kit.ascend import checkout, vllm_source
from tests.harness import test_vllm_source as checks
from tests.meta import broken_vllm_source as broken

pytestmark = pytest.mark.order(0)  # cheap: no pip, no torch


@pytest.mark.parametrize(
    "owner, name, variant, check",
    [
        (vllm_source, "check", broken.check_skipped, checks.check_another_commit_stops_naming_both),
        (vllm_source, "check", broken.check_exact, checks.check_main_verified_prefix_installs),
        (vllm_source, "check", broken.check_without_override, checks.check_override_installs_another_commit),
        (vllm_source, "any_commit", broken.any_commit_lenient, checks.check_override_value_other_than_1_stops),
        (
            checkout,
            "paired_vllm",
            broken.paired_vllm_newest_for_any_tag,
            checks.check_unknown_release_tag_stays_the_one_line_error,
        ),
        (
            vllm_source,
            "describe",
            broken.describe_version_only,
            checks.check_header_names_the_source_commit_and_closure,
        ),
        (
            vllm_source,
            "describe",
            broken.describe_always_verified,
            checks.check_header_says_an_overridden_commit_is_not_verified,
        ),
        (vllm_source, "supported", broken.supported_releases_only, checks.check_recorded_source_install_is_supported),
        (vllm_source, "supported", broken.supported_any, checks.check_unknown_version_refused),
        (vllm_source, "recorded", broken.recorded_whatever_installed, checks.check_unknown_version_refused),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_a_broken_main_verified_leg_fails_its_check(monkeypatch, capsys, tmp_path, owner, name, variant, check):
    check(monkeypatch, capsys, tmp_path)  # the real recipe passes it
    monkeypatch.undo()
    fresh = tmp_path / "broken"
    fresh.mkdir()
    monkeypatch.setattr(owner, name, variant)
    with pytest.raises(AssertionError):
        check(monkeypatch, capsys, fresh)
