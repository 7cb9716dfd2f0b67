"""Importing vllm-ascend (0.23.0, or a checkout of main) on a CPU-only machine, in the one order that works.

Each step clears one blocker met without an NPU:
- the fake ``torch_npu`` (``fake_torch_npu.install``) and the CPU environment
  (``CPU_ENV``) before anything imports vllm, only when the real one cannot be imported;
- Triton's own ``triton.experimental.gluon`` imported first: vllm-ascend main's
  ``__init__`` puts empty stand-ins for it in ``sys.modules`` when it is absent, and
  vLLM 0.27 imports names from it;
- ``vllm_ascend.ops`` imported and ``register_ascend_customop()`` called before the
  proposer module (else a circular import of ``DeviceOperator``);
- the platform's ``is_pin_memory_available`` answers False (``pin_memory=True``
  needs a PrivateUse1 backend the fake cannot provide); vLLM caches it, so the
  cache is cleared, and vLLM 0.27's modules that fixed it at import
  (``PIN_MEMORY``) are set to False;
- Triton runs in its interpreter (``TRITON_INTERPRET=1``), every launch guarded
  (``kernel_bounds``); vllm-ascend's grid size needs the device's vector-core count,
  which has no CPU meaning: ``VECTOR_CORES``; triton-ascend's ``get_element`` is
  the interpreter's (``fake_torch_npu.interpreted_get_element``);
- vLLM inspects model classes in a subprocess, where the fake is not installed:
  the inspection runs in this process instead.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import urllib.parse
from pathlib import Path

from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend import fake_torch_npu, vllm_source
from sim.impls.kit.ascend.checkout import CLOSURES

VLLM_VERSIONS = tuple(sorted(CLOSURES))  # the vLLM releases this adapter runs vllm-ascend against
GLUON = ("triton.experimental.gluon", "triton.experimental.gluon.language")
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
VECTOR_CORES = 8  # grid cap of vllm-ascend's Triton kernels; the spec-decode launch sets its own (kernel_grid)


@functools.cache
def prepare() -> bool:
    """Set the environment, install the fake ``torch_npu`` if needed, import in order. Returns: fake used."""
    if fake_torch_npu.real_torch_npu_importable() is not None:  # no NPU here: CPU tensors, Triton's interpreter
        for key, value in CPU_ENV.items():
            os.environ.setdefault(key, value)
    kernel_bounds.install()
    for name in GLUON:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    fake = fake_torch_npu.install()
    importlib.import_module("vllm_ascend.ops")
    importlib.import_module("vllm_ascend.utils").register_ascend_customop()
    platform_utils = importlib.import_module("vllm.utils.platform_utils")
    platform = importlib.import_module("vllm.platforms").current_platform
    if fake:
        type(platform).is_pin_memory_available = classmethod(lambda cls: False)
        platform_utils.is_pin_memory_available.cache_clear()
        for mod in list(sys.modules.values()):  # vLLM 0.27: PIN_MEMORY = is_pin_memory_available() at import
            if getattr(mod, "__name__", "").startswith("vllm") and getattr(mod, "PIN_MEMORY", False) is True:
                mod.PIN_MEMORY = False
        triton_utils = importlib.import_module("vllm_ascend.ops.triton.triton_utils")
        if triton_utils._NUM_VECTORCORE <= 0:
            triton_utils._NUM_VECTORCORE = VECTOR_CORES
        registry = importlib.import_module("vllm.model_executor.models.registry")
        registry._run_in_subprocess = lambda fn: fn()
        with contextlib.suppress(ImportError):  # 0.13 has no vllm_ascend.worker.utils
            worker_utils = importlib.import_module("vllm_ascend.worker.utils")
            if hasattr(worker_utils, "copy_snapshot_to_gpu"):  # 0.23.0; main copies through vLLM's buffer
                worker_utils.copy_snapshot_to_gpu.__code__ = _unpinned_snapshot.__code__
    return fake


def _unpinned_snapshot(buffer):
    """vllm-ascend 0.23.0's ``copy_snapshot_to_gpu`` without ``pin_memory()``, which a CPU tensor
    cannot do once the private-use backend is named npu: on the CPU the host memory is the device's,
    so the snapshot is a plain copy (every name bound to the function runs this body)."""
    return buffer.gpu.copy_(buffer.cpu.clone(), non_blocking=True)


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
    without it, this leaves ``torch`` and ``sys.modules`` as they were. Which
    vllm-ascend is tested is whatever is installed (a release or a checkout);
    the vLLM beside it must be one the adapter knows (``VLLM_VERSIONS``), or a
    source tree ``checkout install`` built on one's closure (``vllm_source.recorded``).
    """
    if importlib.util.find_spec("vllm_ascend") is None:
        return "vllm_ascend is not installed (tox -e vllm_ascend installs it)"
    try:
        prepare()
        import vllm

        importlib.import_module("vllm_ascend.spec_decode.eagle_proposer")
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"; name it
        return f"import vllm_ascend {installed_version()} failed: {type(exc).__name__}: {exc}"
    if not vllm_source.supported(vllm.__version__):
        return (
            f"vllm {vllm.__version__} is installed beside vllm-ascend {installed_version()}; "
            f"the vllm_ascend adapter runs on vLLM {', '.join(VLLM_VERSIONS)}"
        )
    return None


def source() -> str:
    """Where the installed vllm-ascend comes from: ``release wheel``, or ``checkout PATH at COMMIT``
    (an editable install, as ``tox -e vllm_ascend`` makes one from ``VLLM_ASCEND_SRC``)."""
    try:
        raw = importlib.metadata.distribution("vllm-ascend").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
    info = json.loads(raw) if raw else {}
    if not info.get("dir_info", {}).get("editable"):
        return "release wheel"
    path = Path(urllib.parse.urlparse(info["url"]).path)
    rev = git_revision(path)
    return f"checkout {path} {rev}" if rev else f"checkout {path}, not a git tree"


def git_revision(path: Path) -> str | None:
    """``at COMMIT`` (and ``with local changes``) if ``path`` is the top of a git tree, else None: an
    sdist laid out inside another repository (``.ci/run``) is not that repository's commit."""
    rev = vllm_source.git_at_top(path, "rev-parse", "--short=12", "HEAD")
    if rev is None:
        return None
    dirty = vllm_source.git_at_top(path, "status", "--porcelain", "--untracked-files=no")
    return f"at {rev}{' with local changes' if dirty else ''}"


def describe(name: str = "vllm_ascend") -> str:
    """The report header's line for implementation ``name``: vllm-ascend's version and source, and
    the vLLM version under test (and its source tree, commit and closure if built from source)."""
    import vllm

    return f"{name} (vllm-ascend {installed_version()}, {source()}; {vllm_source.describe(vllm.__version__)})"
