"""``patches.deployed`` on a worker package's ``__init__`` as 0.23.0 and main write it: a patch imported under
a flag that a top-level ``if`` sets by the deployment's versions is deployed as the flag says; an ``if`` that
calls something is never run to find one."""

from __future__ import annotations

import pytest

from sim.impls.kit.ascend import patches

WORKER_INIT = """
import os

if os.environ.get("MTP_TEST_VERSION") == "0.23.0":
    _V2_SUPPORTED = False
else:
    _V2_SUPPORTED = True

if os.environ.get("MTP_TEST_NEVER_RUN") == "1":
    raise RuntimeError("an if that does more than bind was run")

import vllm_ascend.patch.worker.patch_v2.patch_use_v2  # noqa

if _V2_SUPPORTED:
    import vllm_ascend.patch.worker.patch_v2.patch_input_batch  # noqa
"""


@pytest.mark.parametrize("version", ["0.23.0", "0.27.1"])
def test_a_patch_under_a_version_flag_is_deployed_as_the_flag_says(tmp_path, monkeypatch, version):
    init = tmp_path / f"init_{version}.py"
    init.write_text(WORKER_INIT)
    monkeypatch.setenv("MTP_TEST_VERSION", version)
    monkeypatch.setenv("MTP_TEST_NEVER_RUN", "1")
    package = "vllm_ascend.patch.worker.patch_v2"
    assert patches.deployed(init, f"{package}.patch_use_v2")
    assert patches.deployed(init, f"{package}.patch_input_batch") == (version != "0.23.0")
    assert not patches.deployed(init, f"{package}.patch_absent")
