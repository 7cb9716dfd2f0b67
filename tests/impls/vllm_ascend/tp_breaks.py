"""Broken vllm-ascends on tensor-parallel ranks, as a regression there would bring them: each takes the
original function and returns the broken one.

``draft_ids_of_the_local_slice`` is a reduce-sample ``greedy_sample`` (the drafter's, or the rejection
sampler's for the target, ``tp-verify-ids-of-the-local-slice``) reporting each rank's argmax as its index
in the rank's slice of the vocabulary (the slice's offset lost), so an argmax past the first slice comes
out as another id; ``logits_not_gathered`` is a logits processor
whose gather over the TP group is lost, so each rank drafts from its own slice of the vocabulary.

``forward_told_it_is_the_targets`` is a drafter that opens its forward contexts as the target's
(``is_draft_model`` False), so a draft forward is set up with what the target's would get (the class of
vllm-ascend's draft forwards inheriting the target's FlashComm1 / sequence parallelism, #13752).

``candidate_ids_of_the_local_slice`` is the rejection sampler's reduce-sample candidates for random requests
(``apply_top_k_top_p``, as ``apply_sampling_constraints`` calls it) reported by their index in each rank's
slice: a draw past the first slice comes out as another id.

``logits_gathered_by_all_reduce`` is the control of ``logits_not_gathered``: the logits gathered otherwise
and right (each rank's columns placed at its slice in zeros, summed over the TP group), which the gate must
pass.

``draft_ids_from_the_slice_start`` is the fix of the known defect ``reduce-sample-ids-of-a-short-last-shard``:
the same reduction, each rank's index offset by where its slice starts (the padded vocabulary is split
evenly, so every slice is as wide as the widest rank's kept columns, the first rank's), which must meet
the spec; with it, for the rejection sampler's random requests, ``candidates_from_the_slice_start``: each
rank's logits padded to the slice's width (never drawn: -inf) before its candidates are taken, so every
rank gathers as many and the checkout's ``local + rank * width`` is where its slice starts.
"""

from __future__ import annotations


def _greedy(offset):
    """``greedy_sample`` over the TP group with each rank's local argmax offset by ``offset(group, kept)``,
    ``kept`` the columns of the rank's logits (a device tensor: full graphs capture the drafter's sampling)."""

    def greedy_sample(logits):
        from sim.impls.kit.ascend.importing import import_ascend

        group = import_ascend("vllm.distributed.parallel_state").get_tp_group()
        best, local = logits.max(dim=-1)
        ids = local + offset(group, local.new_full((1,), logits.shape[-1]))
        values = group.all_gather(best.unsqueeze(-1), dim=-1)
        every = group.all_gather(ids.unsqueeze(-1), dim=-1)
        return every.gather(-1, values.argmax(dim=-1, keepdim=True)).squeeze(-1)

    return greedy_sample


def draft_ids_of_the_local_slice(original):
    return _greedy(lambda group, kept: 0)


def candidate_ids_of_the_local_slice(original):
    def apply_top_k_top_p(logits, k, p, *top_k):
        candidates = original(logits, k, p, *top_k)
        if not isinstance(candidates, tuple):  # not the reduce-sample flow: no ids to lose
            return candidates
        values, ids = candidates
        return values, ids % logits.shape[-1]

    return apply_top_k_top_p


def logits_not_gathered(original):
    return lambda self, logits: logits


def draft_ids_from_the_slice_start(original):
    def start(group, kept):
        return group.rank_in_group * group.all_gather(kept, dim=0).max()  # on the device: graphs capture it

    return _greedy(start)


def candidates_from_the_slice_start(original):
    def apply_top_k_top_p(logits, k, p, *top_k):
        import torch

        from sim.impls.kit.ascend.importing import import_ascend

        group = import_ascend("vllm.distributed.parallel_state").get_tp_group()
        width = int(group.all_gather(torch.tensor([logits.shape[-1]], device=logits.device), dim=0).max())
        padded = logits.new_full((logits.shape[0], width), float("-inf"))
        padded[:, : logits.shape[-1]] = logits
        return original(padded, k, p, *top_k)

    return apply_top_k_top_p


def forward_told_it_is_the_targets(original):
    def set_ascend_forward_context(*args, **kwargs):
        return original(*args, **{**kwargs, "is_draft_model": False})

    return set_ascend_forward_context


def logits_gathered_by_all_reduce(original):
    def _gather_logits(self, logits):
        from sim.impls.kit.ascend.importing import import_ascend

        group = import_ascend("vllm.distributed.parallel_state").get_tp_group()
        width, rank = logits.shape[-1], group.rank_in_group
        whole = logits.new_zeros(*logits.shape[:-1], width * group.world_size)
        whole[..., rank * width : (rank + 1) * width] = logits
        return group.all_reduce(whole)

    return _gather_logits
