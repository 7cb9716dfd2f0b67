"""Shared helpers of the vllm-ascend differential tests: both views of one case; a rank case's problems
with its replay."""

from __future__ import annotations

from sim.impls.vllm_ascend.adapter import AscendOps
from sim.oracle.cases import BatchCase
from tests.impls import suites

ASCEND, ASCEND_TRITON = AscendOps(triton=False), AscendOps()
SETUP = "tests.impls.vllm_ascend.broken_gate:apply_in_rank"  # a rank applies the session's changed vllm-ascend
WHOLE_SLICES = 128  # a vocabulary of whole 64-id slices: every TP rank keeps its slice's width (the models served)


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
