"""A session leaves nothing in the temp dir: vLLM's config folder and gloo's rendezvous go under one
folder per process that is removed when the process ends (``sim.impls.kit.scratch``). The harness's own
hygiene, a nested session of about 17 s: its CI runs it, a vllm-ascend pull request's gate skips it."""

from __future__ import annotations

from pathlib import Path

from tests.impls.suites import SELF_TEST

ROOT = Path(__file__).resolve().parents[3]

SESSION = """
from sim.impls.vllm_ascend.build import configured
from sim.impls.kit.scratch import scratch


def test_builds_a_proposer():
    configured(2, 16, 64, 8)
    assert scratch("gloo").is_dir()
"""


@SELF_TEST
def test_a_session_leaves_nothing_in_the_temp_dir(pytester, monkeypatch, tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_session=SESSION)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"))
    result.assert_outcomes(passed=1)
    assert sorted(p.name for p in temp.iterdir()) == []
