"""A checkout installed into an env is installed again only when what decides its install changed.

``python -m sim.impls.kit.ascend.install`` (tox's ``commands_pre`` of ``tox -e vllm_ascend``) skips the
installs when the env holds the checkout as the recipe installed it (``installed_already``): the same
tree on the same vLLM release, the same packaging digest (the checkout's ``setup.py``,
``pyproject.toml``, ``requirements.txt``, tag file, and the closure), vLLM from the index, vllm-ascend
editable from that tree. Python files are read live from an editable install, so a pull request's
second run goes straight to the tests. The env's facts are stood in for here (plumbing: the installed
versions and paths); the digest is the real one.
"""

from __future__ import annotations

import json

import pytest

from sim.impls.kit.ascend import checkout, install, vllm_source

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


def _tree(tmp_path):
    (tmp_path / ".github").mkdir()
    (tmp_path / checkout.TAG_FILE).write_text("v0.23.0\n")
    (tmp_path / "setup.py").write_text("setup()\n")
    return tmp_path


@pytest.fixture
def env(tmp_path, monkeypatch):
    """An env that installed ``tree`` on vLLM 0.23.0 from the index: its record, versions and paths."""
    tree = tmp_path / "checkout"
    tree.mkdir()
    _tree(tree)
    record = tmp_path / "record.json"
    monkeypatch.setattr(install, "RECORD", record)
    facts = {"vllm": "0.23.0", "editable": str(tree), "from_source": tmp_path / "no-source-record"}
    monkeypatch.setattr("importlib.metadata.version", lambda dist: facts["vllm"])
    monkeypatch.setattr(vllm_source, "editable_path", lambda dist: facts["editable"])
    monkeypatch.setattr(vllm_source, "record_path", lambda prefix=None: facts["from_source"])
    closure = checkout.ROOT / checkout.CLOSURES["0.23.0"]
    wanted = {"tree": str(tree), "vllm": "0.23.0", "digest": checkout.packaging_digest(tree, closure)}
    record.write_text(json.dumps(wanted))
    return tree, closure, wanted, facts


def test_the_same_checkout_on_the_same_vllm_is_not_installed_again(env):
    tree, closure, wanted, _ = env
    assert install.installed_already(wanted)


def test_a_change_of_packaging_installs_again(env):
    tree, closure, wanted, _ = env
    (tree / "setup.py").write_text("setup(entry_points={})\n")
    changed = {**wanted, "digest": checkout.packaging_digest(tree, closure)}
    assert changed["digest"] != wanted["digest"] and not install.installed_already(changed)


@pytest.mark.parametrize(
    ("fact", "value"),
    [("vllm", "0.27.1"), ("editable", "/elsewhere"), ("editable", None), ("from_source", None)],
    ids=["another-vllm", "another-tree", "not-editable", "vllm-from-a-source-tree"],
)
def test_an_env_changed_since_installs_again(env, fact, value, tmp_path):
    _, _, wanted, facts = env
    if fact == "from_source":
        value = tmp_path / "source-record"
        value.write_text("{}")
    facts[fact] = value
    assert not install.installed_already(wanted)


def test_no_record_installs(env):
    _, _, wanted, _ = env
    install.RECORD.unlink()
    assert not install.installed_already(wanted)
