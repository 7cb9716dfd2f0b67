"""vllm-ascend with a known defect fixed, as a pull request fixing it would: ``broken_gate.FIXES``.

A fix must end the gate with one line, ``fixed: ID no longer present; drop it from the list``, and
nothing else (docs/DESIGN.md, "Implementations under test and their divergences"); a half fix must
fail, naming the values that disagree. Each fix wraps vllm-ascend's own methods, so everything
else runs as the checkout has it (0.23.0's signatures or main's, bound by name):

- ``seq_lens_lowered``: ``padded-seq-lens-not-lowered``, as vllm-ascend #14883 describes it and as
  vLLM's ``EagleProposer.propose`` does: the first pass (merged step 0) keeps the unadjusted
  lengths; before the draft steps, a copy of the batch's ``seq_lens`` lowered by
  ``num_rejected_tokens_gpu`` is what steps 2..K advance from, device and host mirrors alike
  (``host=False``: the device tensor only, a half fix).
- ``computed_from_seq_lens``: ``num-computed-tokens-drift``: each step's ``num_computed_tokens_cpu``
  is its one-token query's context, ``seq_lens_cpu - 1``.
- ``unpadded-max-query-len``'s fix is the one vLLM and 0.13.0 share (``tests.impls.fixes``).

``overflow-seq-len-restart`` has none (``broken_gate.NO_FIX``).
"""

from __future__ import annotations

import functools
import inspect

_REJECTED = "_fix_num_rejected_tokens"  # the call's rejected counts, from _propose to its first step update


def _bound(original, self, args, kwargs) -> inspect.BoundArguments:
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    bound.apply_defaults()
    return bound


def keeps_rejected_counts(propose):
    """``_propose`` that leaves its ``num_rejected_tokens_gpu`` for the first step update."""

    @functools.wraps(propose)
    def wrapper(self, *args, **kwargs):
        setattr(self, _REJECTED, _bound(propose, self, args, kwargs).arguments.get("num_rejected_tokens_gpu"))
        try:
            return propose(self, *args, **kwargs)
        finally:
            setattr(self, _REJECTED, None)

    return wrapper


def seq_lens_lowered(host: bool = True):
    """``attn_update_stack_num_spec_norm`` whose first draft step starts from the lowered lengths."""

    def fix(update):
        @functools.wraps(update)
        def wrapper(self, *args, **kwargs):
            rejected = getattr(self, _REJECTED, None)
            if rejected is None:
                return update(self, *args, **kwargs)
            setattr(self, _REJECTED, None)  # once per call: the next groups and steps chain from this one
            bound = _bound(update, self, args, kwargs)
            cad = self.shallow_copy_metadata(bound.arguments["old_common_metadata"])
            n = rejected.shape[0]
            cad.seq_lens = cad.seq_lens.clone()
            cad.seq_lens[:n] -= rejected.to(cad.seq_lens.dtype)
            if host:
                on_host = rejected.cpu()
                for name in SEQ_LENS[1:]:
                    mirror = getattr(cad, name, None)
                    if mirror is not None:
                        mirror = mirror.clone()
                        mirror[:n] -= on_host.to(mirror.dtype)
                        setattr(cad, name, mirror)
            bound.arguments["old_common_metadata"] = cad
            return update(*bound.args, **bound.kwargs)

        return wrapper

    return fix


def computed_from_seq_lens(update):
    """``attn_update_stack_num_spec_norm`` that hands each step ``num_computed_tokens_cpu = seq_lens_cpu - 1``."""

    @functools.wraps(update)
    def wrapper(self, *args, **kwargs):
        cad, meta = update(self, *args, **kwargs)
        if cad.num_computed_tokens_cpu is not None and cad.seq_lens_cpu is not None:
            cad.num_computed_tokens_cpu = (cad.seq_lens_cpu - 1).to(cad.num_computed_tokens_cpu.dtype)
            bound = _bound(update, self, args, kwargs)
            group = bound.arguments["attn_group"]
            meta = group.get_metadata_builder().build_for_drafting(cad, bound.arguments["draft_index"])
        return cad, meta

    return wrapper


SEQ_LENS = ("seq_lens", "seq_lens_cpu", "_seq_lens_cpu")  # the device lengths and their host mirrors
