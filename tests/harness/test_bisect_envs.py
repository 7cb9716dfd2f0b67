"""``python -m sim bisect``'s envs test the commit checked out, whatever the env running the bisect holds:
a ``vllm_ascend`` of the base env (the released wheel, where ``tox -e vllm_ascend`` was built without
``VLLM_ASCEND_SRC``) never shadows the commit's, and where something does, the step says what."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim import bisect as bisecting

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


def _package(root: Path, name: str, text: str = "") -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(text)
    return root


@pytest.fixture
def envs(tmp_path, monkeypatch) -> bisecting.Envs:
    """Envs over a base holding a released ``vllm_ascend`` and the vLLM a step pairs with; pip does nothing
    (its editable install's finder is asked only after the path, so it cannot decide what imports)."""
    base = _package(_package(tmp_path / "base", "vllm_ascend"), "vllm", '__version__ = "0.23.0"\n')
    monkeypatch.setattr(bisecting.Envs, "_pip", staticmethod(lambda *args, **kwargs: None))
    return bisecting.Envs(tmp_path / "envs", base=base)


def _imported(python: Path) -> Path:
    run = subprocess.run([str(python), "-c", "import vllm_ascend; print(vllm_ascend.__file__)"], capture_output=True)
    return Path(run.stdout.decode().strip())


def test_the_commits_vllm_ascend_imports_ahead_of_the_base_envs(envs, tmp_path):
    tree = _package(tmp_path / "commit", "vllm_ascend")
    python = envs.python("0.23.0")
    envs.install(python, tree)
    assert _imported(python) == tree / "vllm_ascend" / "__init__.py"


def test_a_commit_shadowed_by_the_base_env_cannot_be_installed_and_says_by_what(envs, tmp_path):
    tree = tmp_path / "no-package"  # nothing of its own to import: the base env's would be tested
    tree.mkdir()
    with pytest.raises(bisecting.InstallError, match=r"not what imports: .*base/vllm_ascend/__init__\.py does"):
        envs.install(envs.python("0.23.0"), tree)
