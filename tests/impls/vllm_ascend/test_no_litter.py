"""A session leaves nothing in the temp dir: vLLM's config folder and gloo's rendezvous go under one
folder per process that is removed when the process ends (``sim.impls.kit.scratch``), a data-parallel
rank's included."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SESSION = """
from sim.impls.vllm_ascend.build import configured
from sim.impls.kit.scratch import scratch


def test_builds_a_proposer():
    configured(2, 16, 64, 8)
    assert scratch("gloo").is_dir()


def test_runs_data_parallel_ranks():
    import dataclasses

    from sim.impls.vllm_ascend.data_parallel import DpCase, DpPool, check_dp
    from sim.serving.scenario import RequestSpec, Scenario

    small = Scenario(num_spec_tokens=2, max_iterations=2, requests=(RequestSpec(0, 4, 2),))
    pool = DpPool(2)
    try:
        assert check_dp(DpCase([dataclasses.asdict(small), None]), pool) == []
    finally:
        pool.close()
"""


def test_a_session_leaves_nothing_in_the_temp_dir(pytester, monkeypatch, tmp_path):
    temp = Path(tempfile.mkdtemp(prefix="litter"))  # short: the rank pool's fork server puts a socket there
    try:
        monkeypatch.setenv("TMPDIR", str(temp))
        monkeypatch.setenv("PYTHONPATH", str(ROOT))
        pytester.makepyfile(test_session=SESSION)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--basetemp", str(tmp_path / "base"))
        result.assert_outcomes(passed=2)
        assert sorted(p.name for p in temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)
