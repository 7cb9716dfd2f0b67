"""vllm-ascend 0.13.0 on a CPU-only machine: the same import recipe as 0.23.0, other versions.

``sim.impls.kit.ascend.importing.prepare`` (the fake ``torch_npu``, then vllm-ascend's ops
and custom-op registration, pin memory off, the Triton vector-core count, model inspection
in-process) works unchanged for 0.13.0; the fake also stubs ``torch_npu.npu.streams``, which
0.13's ``vllm_ascend.utils`` imports. On top, 0.13's MLA path reads RoPE tables that the
model's rotary embedding normally records: ``rope_tables`` records tables whose entry at
position p is p, so a metadata's ``cos`` names the position its RoPE was taken at.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from pathlib import Path

import torch

from sim.impls.kit.ascend import checkout
from sim.impls.kit.ascend.importing import import_ascend, installed_version, prepare
from sim.impls.kit.ascend.vllm_source import editable_path
from sim.impls.kit.tiny_config import MAX_MODEL_LEN

VLLM_ASCEND_VERSION = "0.13.0"
VLLM_VERSION = "0.13.0"
ENV = "tox -e vllm_ascend_0_13"
PROPOSER_MODULE = "vllm_ascend.spec_decode.mtp_proposer"
# rows of the recorded RoPE tables: every position a draft step can reach, unclamped (each exact in float32)
ROPE_POSITIONS = 2 * MAX_MODEL_LEN

__all__ = ["import_ascend", "prepare", "rope_tables", "unavailable_reason"]


@functools.cache
def rope_tables() -> None:
    """Record RoPE tables in ``vllm_ascend.ops.rotary_embedding`` (cos[p] = p, sin[p] = -p), as the
    model's rotary embedding would on an NPU, so ``get_cos_and_sin_mla`` works and is readable."""
    rope = import_ascend("vllm_ascend.ops.rotary_embedding")
    table = torch.arange(ROPE_POSITIONS, dtype=torch.float32).unsqueeze(1)
    rope._record_cos_and_sin_cache(table, -table)


def unavailable_reason() -> str | None:
    """Why vllm-ascend 0.13.0 or a checkout of its line (on vLLM 0.13.0) cannot be tested here, or None if it can.

    Nothing is installed or imported unless vllm_ascend is present.
    """
    if importlib.util.find_spec("vllm_ascend") is None:
        return f"vllm_ascend is not installed ({ENV} installs it)"
    tree = editable_path("vllm-ascend")
    if tree is not None:  # a checkout of the 0.13 line (VLLM_ASCEND_0_13_SRC): what it pairs with decides
        why = checkout.unpaired_reason(Path(tree), line=checkout.LINES["vllm_ascend_0_13"])
        if why:
            return f"{why} ({ENV} installs a checkout of releases/v0.13.0)"
    else:
        got = str(installed_version()).split("+")[0]
        if got != VLLM_ASCEND_VERSION:
            return (
                f"vllm-ascend {got} is installed; this adapter is pinned to {VLLM_ASCEND_VERSION} ({ENV} installs it)"
            )
    try:
        prepare()
        import vllm

        importlib.import_module(PROPOSER_MODULE)
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"; name it
        return f"import vllm_ascend failed: {type(exc).__name__}: {exc} ({ENV} installs it)"
    if vllm.__version__ != VLLM_VERSION:
        return f"vllm {vllm.__version__} is installed; vllm-ascend {VLLM_ASCEND_VERSION} needs vllm {VLLM_VERSION}"
    return None
