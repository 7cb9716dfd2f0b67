"""The gate catches an MLA builder handing an MLA draft's attention what its kernels must not read.

An MLA draft (``Scenario.draft_attn='mla'``) has its metadata built by the checkout's
``AscendMLAMetadataBuilder``, and the tiny attention reads what the MLA kernels read of it
(``sim.impls.kit.ascend.mla``): the decode part's host lengths and table, the prefill part's query
offsets and chunked context, the slots, and the RoPE its cos and sin carry. Each break
(``mla_breaks``) must fail the serving runs by name (the trace comparison: step, field, both values).
A correct builder written otherwise passes: the checkout's with ``mla-draft-cos-sin-shared`` fixed
(``test_defect_fixes.py``). ``python -m sim explain`` finds the defect's case in an MLA draft.
"""

from __future__ import annotations

import dataclasses

import pytest

from sim.impls.kit.ascend.importing import import_ascend
from tests.checks.e2e_checks import check_implementation
from tests.impls.vllm_ascend import mla_breaks
from tests.properties.test_propose_loop import TYPICAL

MLA = dataclasses.replace(TYPICAL, draft_attn="mla")
BREAKS = [
    ("build_decode_metadata", mla_breaks.rope_of_the_next_position, r"step \d rope positions\[\d+:\].*: got \["),
    ("build_decode_metadata", mla_breaks.decode_lengths_one_short, r"step \d seq_lens\[\d+:\].*: got \["),
    ("build_chunked_metadata", mla_breaks.prefill_context_dropped, r"first pass seq_lens\[\d+:\].*: got \["),
]


@pytest.mark.parametrize(("method", "breaking", "match"), BREAKS, ids=[b.__name__ for _, b, _ in BREAKS])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_a_broken_mla_builder_fails_by_name(monkeypatch, device, impl, method, breaking, match, padded):
    cls = import_ascend("vllm_ascend.attention.mla_v1").AscendMLAMetadataBuilder
    monkeypatch.setattr(cls, method, breaking(getattr(cls, method)))
    with pytest.raises(AssertionError, match=match):
        check_implementation(impl, dataclasses.replace(MLA, padded=padded), device, f"mla-{breaking.__name__}")


def test_explain_finds_the_shared_cos_sin_in_an_mla_draft(impl, device):
    """``python -m sim explain mla-draft-cos-sin-shared``: its smallest case is an MLA draft (the
    divergence's setting), where the spec names the rotation each step was given."""
    from sim.explain import smallest_case
    from sim.impls.divergence import spec_for
    from sim.impls.vllm_ascend.divergences import DIVERGENCES
    from sim.serving.run import run_scenario

    divergence = DIVERGENCES["mla-draft-cos-sin-shared"]
    case = smallest_case(impl, divergence, device)
    assert case is not None and case.draft_attn == "mla"
    report = run_scenario(case, device, impl, rules=spec_for(impl.rules, divergence), stop_at_first_mismatch=False)
    assert any("rope positions" in m.what for m in report.mismatches), [str(m) for m in report.mismatches[:3]]
