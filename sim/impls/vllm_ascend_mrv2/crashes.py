"""The MRV2 speculator's known defects that crash, sidestepped everywhere but where their pin runs them
(``sim.impls.kit.crashes``): at the place each crash would begin, the one step of its fix."""

from __future__ import annotations

from sim.impls.kit.crashes import Sidesteps
from sim.impls.vllm_ascend_mrv2 import divergences, generation

SIDESTEPS = {
    divergences.DUMMY_SEQ_LENS.id: "the dummy batch handed the runner's whole seq_lens_np buffer, as a real batch is",
}
_crashes = Sidesteps(SIDESTEPS, lambda: divergences.in_force(generation.name()).DIVERGENCES)
sidestepped, letting = _crashes.sidestepped, _crashes.letting
