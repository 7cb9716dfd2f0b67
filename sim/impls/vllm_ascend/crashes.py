"""The V1 drafter's known defects that crash, sidestepped everywhere but where their pin runs them
(``sim.impls.kit.crashes``): at the place each crash would begin, the one step of its upstream fix."""

from __future__ import annotations

from sim.impls.kit.crashes import Sidesteps
from sim.impls.vllm_ascend import branch_divergences, generation

SIDESTEPS = {
    branch_divergences.DUMMY_STALE_INDICES.id: "the drafter's sample indices cleared before its dummy run (vllm-ascend #10080)",
    branch_divergences.PADDING_STALE_INDICES.id: "the drafter's sample indices cleared before each call, so that past the "
    "call's own only zeros are left (vllm-ascend #9867)",
    branch_divergences.MTP_MODEL_GRAPH.id: "an MTP draft's whole merged draft captured, not its model (vllm-ascend #6860)",
}
_crashes = Sidesteps(SIDESTEPS, lambda: branch_divergences.in_force(generation.name()).DIVERGENCES)
sidestepped, letting = _crashes.sidestepped, _crashes.letting
