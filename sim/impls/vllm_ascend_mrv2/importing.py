"""Importing vllm-ascend's MRV2 speculator on a CPU-only machine: the V1 adapter's order, and SciPy.

``sim.impls.kit.ascend.importing.prepare`` clears every blocker vllm-ascend's import meets without an
NPU. On main one more remains: ``AscendAutoRegressiveSpeculator`` imports every Ascend attention
backend to tell them apart, and ``attention/sfa_v1.py`` imports ``scipy`` at the top, for a Hadamard
matrix its sparse-attention layer builds at construction. SciPy is no dependency of the CPU closure
(requirements/vllm_ascend.txt); where it is absent, ``sfa_v1`` is imported once against a stand-in
module that names itself on any use (nothing on the MTP path builds an SFA layer), and the stand-in
is taken out of ``sys.modules`` again at once, so nothing else sees it.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import sys
import types

from sim.impls.kit.ascend import importing as ascend_importing

SFA = "vllm_ascend.attention.sfa_v1"


class _AbsentScipy(types.ModuleType):
    def __getattr__(self, name):
        raise ImportError(f"scipy.{name}: scipy is not installed (a stand-in let {SFA} import for the MTP path)")


@functools.cache
def prepare() -> None:
    """The kit's ``prepare``, then main's ``sfa_v1`` against a stand-in SciPy if SciPy is absent."""
    ascend_importing.prepare()
    if importlib.util.find_spec(SFA) is None or importlib.util.find_spec("scipy") is not None:
        return
    stand_in = _AbsentScipy("scipy")
    stand_in.__spec__ = importlib.machinery.ModuleSpec("scipy", None)
    sys.modules["scipy"] = stand_in
    try:
        importlib.import_module(SFA)
    finally:
        del sys.modules["scipy"]
