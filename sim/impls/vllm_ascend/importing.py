"""Importing vllm-ascend 0.23.0 on a CPU-only machine, in the one order that works.

Each step clears one blocker met without an NPU:
- the fake ``torch_npu`` (``fake_torch_npu.install``) before anything imports vllm,
  only when the real one cannot be imported;
- ``vllm_ascend.ops`` imported and ``register_ascend_customop()`` called before the
  proposer module (else a circular import of ``DeviceOperator``);
- the platform's ``is_pin_memory_available`` answers False (``pin_memory=True``
  needs a PrivateUse1 backend the fake cannot provide); vLLM caches it, so the
  cache is cleared;
- Triton runs in its interpreter (``TRITON_INTERPRET=1``); vllm-ascend's grid size
  needs the device's vector-core count, which has no CPU meaning: ``VECTOR_CORES``;
- vLLM inspects model classes in a subprocess, where the fake is not installed:
  the inspection runs in this process instead.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os

from sim.impls.vllm_ascend import fake_torch_npu

VLLM_ASCEND_VERSION = "0.23.0"
UNPINNED = "MTP_HARNESS_UNPINNED"  # set: test whatever vllm-ascend and vllm are importable
VLLM_VERSION = "0.23.0"
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
VECTOR_CORES = 8  # grid size of vllm-ascend's Triton kernels (the cap only; any value >= 1 gives the same result)


@functools.cache
def prepare() -> bool:
    """Set the environment, install the fake ``torch_npu`` if needed, import in order. Returns: fake used."""
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    fake = fake_torch_npu.install()
    importlib.import_module("vllm_ascend.ops")
    importlib.import_module("vllm_ascend.utils").register_ascend_customop()
    platform_utils = importlib.import_module("vllm.utils.platform_utils")
    platform = importlib.import_module("vllm.platforms").current_platform
    if fake:
        type(platform).is_pin_memory_available = classmethod(lambda cls: False)
        platform_utils.is_pin_memory_available.cache_clear()
        triton_utils = importlib.import_module("vllm_ascend.ops.triton.triton_utils")
        if triton_utils._NUM_VECTORCORE <= 0:
            triton_utils._NUM_VECTORCORE = VECTOR_CORES
        registry = importlib.import_module("vllm.model_executor.models.registry")
        registry._run_in_subprocess = lambda fn: fn()
    return fake


def import_ascend(module: str = "vllm_ascend"):
    """Import ``module`` (of vllm or vllm_ascend) after ``prepare()``."""
    prepare()
    return importlib.import_module(module)


def installed_version() -> str:
    """vllm-ascend's version, from its package metadata (a source checkout may have no ``_version.py``)."""
    try:
        return importlib.metadata.version("vllm-ascend")
    except importlib.metadata.PackageNotFoundError:
        return getattr(importlib.import_module("vllm_ascend"), "__version__", "unknown")


def unavailable_reason() -> str | None:
    """Why vllm-ascend cannot be tested here, or None if it can.

    Nothing is installed or imported unless vllm_ascend is present: in an env
    without it, this leaves ``torch`` and ``sys.modules`` as they were.
    """
    if importlib.util.find_spec("vllm_ascend") is None:
        return "vllm_ascend is not installed (tox -e vllm_ascend installs it)"
    try:
        prepare()
        import vllm

        importlib.import_module("vllm_ascend.spec_decode.eagle_proposer")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"; name it
        return f"import vllm_ascend failed: {type(exc).__name__}: {exc} (tox -e vllm_ascend installs it)"
    if os.environ.get(UNPINNED):  # a vllm-ascend checkout under development (docs/upstream-ci.md)
        return None
    got = installed_version()
    if str(got).split("+")[0] != VLLM_ASCEND_VERSION:
        return (
            f"vllm-ascend {got} is installed; the adapter is pinned to {VLLM_ASCEND_VERSION} "
            f"(set {UNPINNED}=1 to test another version against the same divergence table)"
        )
    if vllm.__version__ != VLLM_VERSION:
        return f"vllm {vllm.__version__} is installed; vllm-ascend {VLLM_ASCEND_VERSION} needs vllm {VLLM_VERSION}"
    return None
