"""What the harness lacks of vllm-ascend's own schedulers is read off the checkout's files
(``sim.impls.vllm_ascend.scheduler_lacks``): a file absent, a copy keeping vLLM's first-scheduling rule from before
vLLM #43733, a copy reading a request field the installed vLLM never sets; a whole copy lacks nothing."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest

from sim.impls.features import Feature
from sim.impls.kit.ascend import schedulers
from sim.impls.vllm_ascend import scheduler_lacks

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

LOOKAHEAD = "effective_lookahead_tokens = 0 if limit_lookahead_tokens else self.num_lookahead_tokens\n"
KEPT = "effective_lookahead_tokens = 0 if request.num_computed_tokens == 0 else self.num_lookahead_tokens\n"
KEPT_WRAPPED = (  # as vLLM's formatter writes it
    "effective_lookahead_tokens = (\n    0 if request.num_computed_tokens == 0 else self.num_lookahead_tokens\n)\n"
)
READS = "if request.async_tokens_to_discard == 0:\n    pass\n"


def _whole(name: str, rule: str = LOOKAHEAD) -> str:
    """Scheduler ``name``'s file in the form driven: the classes the kit builds (balance scheduling's installing
    ShortRequestFirst's queue), and ``rule``."""
    classes = "".join(f"class {c}(object):\n    pass\n" for c in schedulers.CLASSES.get(name, ()) if c)
    installs = f"from {schedulers.MODULES['short_request_first']} import install\n" if name == "balance" else ""
    return installs + classes + rule


WHOLE = {name: _whole(name) for name in scheduler_lacks.FEATURES}


def _vllm(tmp_path, monkeypatch, sets_the_field: bool, vllm_rule: str):
    """An installed vLLM: its ``Request``, setting ``async_tokens_to_discard`` or not, and its ``Scheduler``,
    whose ``schedule`` holds ``vllm_rule``."""
    body = "self.async_tokens_to_discard = 0" if sets_the_field else "self.num_computed_tokens = 0"
    path = tmp_path / "vllm_v1.py"
    path.write_text(
        f"class Request:\n    def __init__(self):\n        {body}\n"
        f"class Scheduler:\n    def schedule(self):\n        {vllm_rule}"
    )
    spec = importlib.util.spec_from_file_location("fake_vllm_v1", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # where inspect finds its source
    spec.loader.exec_module(module)
    return module


def _lacks(
    tmp_path, monkeypatch, files: dict[str, str], sets_the_field: bool = False, vllm_rule: str = LOOKAHEAD
) -> dict:
    """``scheduler_lacks.lacks`` over a checkout holding ``files`` (scheduler name -> source), on a vLLM as
    ``_vllm`` makes it."""
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    vllm = _vllm(tmp_path, monkeypatch, sets_the_field, vllm_rule)
    monkeypatch.setattr(schedulers, "path", lambda name: tmp_path / f"{name}.py")
    monkeypatch.setattr(schedulers, "_import", lambda module: vllm)
    return scheduler_lacks.lacks.__wrapped__()


def test_whole_copies_lack_nothing(tmp_path, monkeypatch):
    assert _lacks(tmp_path, monkeypatch, WHOLE) == {}


def test_an_absent_file_is_said(tmp_path, monkeypatch):
    files = {name: text for name, text in WHOLE.items() if name != "dynamic_batch"}
    lacks = _lacks(tmp_path, monkeypatch, files)
    assert list(lacks) == [Feature.DYNAMIC_BATCH]
    assert "dynamic_batch.py is absent" in lacks[Feature.DYNAMIC_BATCH].reason


@pytest.mark.parametrize("name", sorted(scheduler_lacks.WITHOUT_LOOKAHEAD))
def test_a_copy_keeping_the_rule_lacks_its_scheduler_by_the_defect(tmp_path, monkeypatch, name):
    files = {**WHOLE, name: _whole(name, KEPT)}
    lacks = _lacks(tmp_path, monkeypatch, files)
    feature = scheduler_lacks.FEATURES[name]
    assert list(lacks) == [feature] and lacks[feature].reason == scheduler_lacks.WITHOUT_LOOKAHEAD[name]


def test_the_recompute_copy_keeping_the_rule_is_left_to_its_pin(tmp_path, monkeypatch):
    """The recompute scheduler meets the rule for a one-token prompt only: its pin runs it, nothing is lacked."""
    files = {**WHOLE, "recompute": _whole("recompute", KEPT)}
    assert _lacks(tmp_path, monkeypatch, files) == {}


@pytest.mark.parametrize(("sets_the_field", "lacked"), [(False, True), (True, False)])
def test_a_recompute_copy_reading_a_field_lacks_it_where_vllm_never_sets_it(
    tmp_path, monkeypatch, sets_the_field, lacked
):
    files = {**WHOLE, "recompute": _whole("recompute", LOOKAHEAD + READS)}
    lacks = _lacks(tmp_path, monkeypatch, files, sets_the_field)
    assert (lacks.get(Feature.RECOMPUTE_SCHEDULER) is scheduler_lacks.RECOMPUTE_CRASH) is lacked


@pytest.mark.parametrize(
    ("files", "feature", "said"),
    [
        # v0.24.0rc's ShortRequestFirst: the queue, selected through the recompute scheduler only
        ({"short_request_first": LOOKAHEAD}, Feature.SHORT_REQUEST_FIRST, "ShortRequestFirstAsyncScheduler"),
        ({"balance": LOOKAHEAD}, Feature.SHORT_REQUEST_FIRST, "BalanceScheduler's ShortRequestFirstRequestQueue"),
        (
            {"batch_job_aware": _whole("batch_job_aware").replace("class BatchJobAwareAsync", "class Other")},
            Feature.BATCH_JOB_AWARE,
            "BatchJobAwareAsyncScheduler",
        ),
    ],
)
def test_a_scheduler_without_the_classes_driven_is_said(tmp_path, monkeypatch, files, feature, said):
    lacks = _lacks(tmp_path, monkeypatch, {**WHOLE, **files})
    assert list(lacks) == [feature] and said in lacks[feature].reason


@pytest.mark.parametrize("rule", [KEPT, KEPT_WRAPPED], ids=["one-line", "wrapped"])
def test_vllms_own_schedule_keeping_the_rule_is_lacked(tmp_path, monkeypatch, rule):
    lacks = _lacks(tmp_path, monkeypatch, WHOLE, vllm_rule=rule.replace("\n", "\n        "))
    assert lacks == {Feature.VLLM_SCHEDULER: scheduler_lacks.VLLM_WITHOUT_LOOKAHEAD}


PLATFORM_INIT = """
import os

from os import getenv

NEVER = False

if NEVER:
    import vllm_ascend.patch.platform.patch_never  # noqa
    import vllm_ascend.patch.platform.patch_always  # noqa

import vllm_ascend.patch.platform.patch_always  # noqa

if getenv("MTP_TEST_DEPLOYED") == "1":
    import vllm_ascend.patch.platform.patch_when_set  # noqa
else:
    import vllm_ascend.patch.platform.patch_when_unset  # noqa
"""


@pytest.mark.parametrize("flag", ["1", "0"])
def test_a_platform_patch_is_deployed_as_the_package_imports_it(tmp_path, monkeypatch, flag):
    """``schedulers.deployed``: a patch the platform's package imports at its top level, or under an ``if`` whose
    test holds here (evaluated over the package's own imports), and no other."""
    (tmp_path / "__init__.py").write_text(PLATFORM_INIT)
    monkeypatch.setattr(schedulers, "_platform", lambda name: tmp_path / f"{name}.py")
    monkeypatch.setenv("MTP_TEST_DEPLOYED", flag)
    got = {
        name
        for name in ("patch_always", "patch_when_set", "patch_when_unset", "patch_never")
        if schedulers.deployed(name)
    }
    assert got == {"patch_always", "patch_when_set" if flag == "1" else "patch_when_unset"}
