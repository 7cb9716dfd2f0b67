"""One of ``NPUModelRunner``'s methods, compiled from vllm-ascend's own source.

``vllm_ascend.worker.model_runner_v1`` does not import in the CPU environment (it imports
``attention.sfa_v1``, which imports ``scipy``, outside the pinned closure), but the full-graph
path calls one runner method on its padded ``query_start_loc``: ``_pad_query_start_loc_for_fia``.
``runner_method`` takes that method's definition from the installed source file (``ast``) and
compiles it with the names it uses, so what runs is vllm-ascend's code of the version under test,
not a copy.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import torch

from sim.impls.vllm_ascend.importing import import_ascend

RUNNER = "vllm_ascend/worker/model_runner_v1.py"


def _source() -> Path:
    spec = importlib.util.find_spec("vllm_ascend")
    return Path(next(iter(spec.submodule_search_locations))).parent / RUNNER


def runner_method(name: str):
    """``NPUModelRunner.<name>`` as a plain function (bind it with ``__get__``)."""
    path = _source()
    tree = ast.parse(path.read_text())
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NPUModelRunner")
    found = [n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise LookupError(f"NPUModelRunner.{name}: not in {path}")
    module = ast.Module(body=[found[0]], type_ignores=[])
    names = {"torch": torch, "np": np, "CUDAGraphMode": import_ascend("vllm.config").CUDAGraphMode}
    utils = import_ascend("vllm_ascend.worker.utils")
    if hasattr(utils, "copy_snapshot_to_gpu"):
        names["copy_snapshot_to_gpu"] = utils.copy_snapshot_to_gpu
    exec(compile(module, str(path), "exec"), names)  # noqa: S102 - vllm-ascend's own method, from its file
    return names[name]
