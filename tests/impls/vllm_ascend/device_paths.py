"""The code paths vllm-ascend takes on Ascend devices other than the A2/A3 the simulator stands for.

``vllm_ascend.sample.sampler`` picks ``apply_top_k_top_p`` by device type at import: the fused
``torch_npu.npu_top_k_top_p`` on A2/A3, its own torch code (``_apply_top_k_top_p_pytorch``) elsewhere. A
rank's setup here selects the other path, as such a device's import would, so the gate runs that code too.
"""

from __future__ import annotations

import pytest


def pytorch_top_k_top_p(*fixes: str):
    """A rank's setup (``TpSampleCase.setup``): the session's changed vllm-ascend (if any) and the fixes
    ``fixes`` of ``broken_gate`` applied, then the sampler's torch path (as changed by them) in place of the
    fused kernel's, in the rejection sampler and the sampler alike; returns what undoes it all."""
    from sim.impls.kit.ascend.importing import import_ascend
    from tests.impls.vllm_ascend.broken_gate import apply_in_rank

    undo = [apply_in_rank(), *(apply_in_rank(fix) for fix in fixes)]
    sampler = import_ascend("vllm_ascend.sample.sampler")
    patch = pytest.MonkeyPatch()
    for module in (sampler, import_ascend("vllm_ascend.sample.rejection_sampler")):
        patch.setattr(module, "apply_top_k_top_p", sampler._apply_top_k_top_p_pytorch)
    undo.append(patch.undo)

    def undo_all():
        for step in reversed(undo):
            step()

    return undo_all
