"""Shared helpers of the vllm-ascend differential tests: both views of one case; a rank case's problems
with its replay."""

from __future__ import annotations

import pytest

from sim.impls.features import Feature
from sim.impls.vllm_ascend.adapter import AscendOps
from sim.oracle.cases import BatchCase
from tests.impls import suites

ASCEND, ASCEND_TRITON = AscendOps(triton=False), AscendOps()
SETUP = "tests.impls.vllm_ascend.broken_gate:apply_in_rank"  # a rank applies the session's changed vllm-ascend
# The orders and modes the multi-rank suites run vLLM's schedulers in: each order once, each mode once (a
# pool case costs seconds)
VLLM_SCHEDULED_ON_RANKS = pytest.mark.parametrize(
    ("asynchronous", "mode"),
    [
        pytest.param(False, "eager", id="sync-eager"),
        pytest.param(True, "full", id="async-full", marks=pytest.mark.uses(Feature.ASYNC_SCHEDULING)),
    ],
)
WHOLE_SLICES = 128  # a vocabulary of whole 64-id slices: every TP rank keeps its slice's width (the models served)
# The multi-rank cases' place in the gate: each path's first cases right after the one-rank fixed runs (order
# 0), so that every DP and TP break (each a case of its path fails) shows there, before the rest of the
# paths' cases (order 2, with the drawn serving runs). A worker's first case of a path first starts its pool
# of rank processes (about 8 s).
FIRST_OF_PATH, REST_OF_PATH = pytest.mark.order(1), pytest.mark.order(2)


def first_of_path(values, first: int = 1, uses=lambda value: ()) -> list:
    """``values`` of a parametrize, the first ``first`` of them among their path's first cases
    (``FIRST_OF_PATH``), the rest after (``REST_OF_PATH``), each with the ``uses`` marks of the features
    it selects. A value that is a tuple is one per argument."""
    return [
        pytest.param(
            *(v if isinstance(v, tuple) else (v,)), marks=[FIRST_OF_PATH if i < first else REST_OF_PATH, *uses(v)]
        )
        for i, v in enumerate(values)
    ]


def both(case: BatchCase, padded: bool, ops: AscendOps = ASCEND):
    """(batch, sampled, core's PreparedCall, vllm-ascend's PreparedCall) of one case."""
    return suites.both(case, padded, ops)


def with_replay(problems: list[str], case, name: str) -> list[str]:
    """``problems`` of a case on ranks (``DpCase``, ``TpCase``), and where there are some, the case saved
    under ``failures/NAME.json`` with the command that replays it."""
    if problems:
        path = case.save(f"failures/{name}.json")
        problems.append(f"replay: python -m sim replay {path} --impl vllm_ascend")
    return problems
