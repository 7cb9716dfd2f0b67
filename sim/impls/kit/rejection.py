"""A vLLM-style rejection sampler (``rejection_sample`` of vLLM's or vllm-ascend's
``rejection_sampler`` module: the same positional arguments in every release the adapters run) on a
verification batch (``sim.oracle.rejection.Verification``): what decides how many drafts each request
keeps, and so the drafter's next input.

It runs as the runner calls it after the target's forward, on the implementation's code, its Triton
kernels in the interpreter with every launch guarded (``kernel_bounds``). The sampling metadata is
vLLM's own ``SamplingMetadata``, with the temperatures the batch gives (0: greedy) and nothing else
set. ``tolerated``: a known defect's accesses, let through as named; ``Sampled`` says which happened
and whether a kernel that could make them was launched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from sim.impls.kit import kernel_bounds
from sim.oracle.rejection import Verification


@dataclass
class Sampled:
    rows: list[list[int]]  # [num_reqs][max_spec_len + 1]
    tolerated_seen: set  # the tolerated accesses the kernels made
    tolerated_could_show: bool  # a kernel named by a tolerated access was launched


def sampling_metadata(
    metadata_module, logits_processors, temperature: tuple[float, ...], device: torch.device, top_k=None
):
    """vLLM's ``SamplingMetadata`` (of ``metadata_module``) for requests of these temperatures and top-ks
    (None: no request sets one), no seeds, top-p, penalties or logprobs; ``logits_processors``: an empty
    ``LogitsProcessors`` for the required field."""
    greedy = [t == 0 for t in temperature]
    given = {
        "temperature": torch.tensor(temperature, dtype=torch.float32, device=device),
        "all_greedy": all(greedy),
        "all_random": not any(greedy),
        "top_p": None,
        "top_k": None if top_k is None else torch.tensor(top_k, dtype=torch.int32, device=device),
        "generators": {},
        "max_num_logprobs": None,
        "no_penalties": True,
        "prompt_token_ids": None,
        "output_token_ids": [[] for _ in temperature],
        "allowed_token_ids_mask": None,
        "bad_words_token_ids": {},
    }
    empty = torch.empty(0, device=device)
    for f in dataclasses.fields(metadata_module.SamplingMetadata):
        if f.name not in given and f.default is dataclasses.MISSING:
            given[f.name] = empty if f.name.endswith("_penalties") else logits_processors
    return metadata_module.SamplingMetadata(**given)


def sample(rejection_sample, metadata, v: Verification, device: torch.device, tolerated=(), constrain=None) -> Sampled:
    """``rejection_sample``'s output rows for ``v`` (``metadata``: its ``SamplingMetadata``); ``constrain``:
    what the sampler's ``forward`` hands it in place of the target's logits, ``constrain(logits,
    cu_num_draft_tokens, metadata)`` (vllm-ascend's ``apply_sampling_constraints``)."""
    counts = [len(d) for d in v.drafts]
    cu = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    draft_ids = torch.tensor([t for d in v.drafts for t in d], dtype=torch.int32, device=device)
    bonus = torch.tensor(v.bonus, dtype=torch.int32, device=device).view(-1, 1)
    probs = None if v.draft_probs is None else v.draft_probs.to(device).contiguous()
    logits = v.target_logits.to(device, torch.float32).contiguous()
    with kernel_bounds.tolerating(*tolerated) as watched:
        if constrain is not None:
            logits = constrain(logits, cu, metadata)
        out = rejection_sample(draft_ids, counts, v.max_spec_len, cu, probs, logits, bonus, metadata)
    kernels = {a.kernel for a in tolerated}
    return Sampled(out.cpu().tolist(), set(watched.seen), bool(kernels & watched.launched))
