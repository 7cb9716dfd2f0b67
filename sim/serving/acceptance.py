"""Acceptance by a target that agrees with a correct proposer: the ``reference`` accept policy.

The tiny target's greedy tokens are unrelated to the draft model, so its acceptance rate says
nothing about a proposer's quality. Under ``accept="reference"`` the verifier takes a random
number of a request's drafts (as ``accept="random"``, so that rejections happen, as they do on
a real target) but never past the first that differs from the draft the from-scratch reference
computes for that request (docs/DESIGN.md, "MTP semantics"). A correct proposer's acceptance is
the random policy's; another's, on the same workload, shows per draft position what its
differences cost.
"""

from __future__ import annotations

from sim.oracle.reference_drafts import reference_drafts


def reference_drafter(ref_model, target, scenario):
    """``drafts(history, mrope)``: the reference's top-1 drafts of a request that accepted ``history[:-1]``."""
    aux = scenario.method == "eagle3"

    def drafts(history: list[int], mrope) -> list[int]:
        hidden = (target.sequence_aux_hidden if aux else target.sequence_hidden)(history[:-1])
        refs = reference_drafts(ref_model, history, hidden, scenario.num_spec_tokens, scenario.max_model_len, mrope)
        return [r.top1 for r in refs]

    return drafts
