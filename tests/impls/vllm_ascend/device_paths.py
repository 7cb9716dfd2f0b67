"""The code paths vllm-ascend takes on Ascend devices other than the A2/A3 the simulator stands for.

``vllm_ascend.sample.sampler`` picks ``apply_top_k_top_p`` by device type at import: the fused
``torch_npu.npu_top_k_top_p`` on A2/A3, its own torch code (``_apply_top_k_top_p_pytorch``) elsewhere. A
rank's setup here selects the other path, as such a device's import would, so the gate runs that code too.
"""

from __future__ import annotations

import pytest

from tests.impls.fixes import edited

# The fix of ``reduce-sample-top-k-of-a-slice-or-more-dropped`` (the same text in 0.23.0 and main): a top-k
# counted over the gathered candidates, not one rank's columns; only a top-k of all of them is no top-k.
TOP_K_OVER_THE_CANDIDATES = (
    ("kk = k.to(torch.long).clamp(min=1, max=V_local)", "kk = k.to(torch.long).clamp(min=1, max=probs_sort.size(1))"),
    ("no_top_k_mask = (kk == V_local).unsqueeze(1)", "no_top_k_mask = (kk == probs_sort.size(1)).unsqueeze(1)"),
)


def pytorch_top_k_top_p(fix: str | None = None, fixed: str = ""):
    """A rank's setup (``TpSampleCase.setup``): the sampler's torch path in place of the fused kernel's, in the
    rejection sampler and the sampler alike (``fixed="fixed"``: with ``TOP_K_OVER_THE_CANDIDATES``), after the
    fix ``fix`` of ``broken_gate`` (if any); returns what undoes both."""
    from sim.impls.kit.ascend.importing import import_ascend
    from tests.impls.vllm_ascend.broken_gate import apply_in_rank

    undo_fix = apply_in_rank(fix) if fix else (lambda: None)
    sampler = import_ascend("vllm_ascend.sample.sampler")
    torch_path = sampler._apply_top_k_top_p_pytorch
    if fixed:
        torch_path = edited(torch_path, *TOP_K_OVER_THE_CANDIDATES)
    patch = pytest.MonkeyPatch()
    patch.setattr(sampler, "apply_top_k_top_p", torch_path)
    patch.setattr(import_ascend("vllm_ascend.sample.rejection_sampler"), "apply_top_k_top_p", torch_path)

    def undo():
        patch.undo()
        undo_fix()

    return undo
