"""vllm-ascend's rejection sampler (``vllm_ascend.sample.rejection_sampler.rejection_sample``) on a
verification batch (``sim.oracle.rejection.Verification``): what decides how many drafts each request keeps, and so the drafter's next input.

It runs as the runner calls it after the target's forward, on the checkout's code: its Triton
kernels in the interpreter with every launch guarded (``kit.kernel_bounds``; triton-ascend's
``get_element`` interpreted, ``fake_torch_npu``), or, with ``triton=False``, its torch fallback,
what ``HAS_TRITON = False`` selects in vllm-ascend itself. The sampling metadata is vLLM's own
``SamplingMetadata``, with the temperatures the batch gives (0: greedy) and nothing else set.

``READS_BEFORE_CU_NUM_DRAFT_TOKENS``: the accesses of the defect
``rejection-kernels-read-before-their-buffer``, tolerated exactly (each kernel's load of element -1
of its cumulative-count argument), so that every other access and every output is still checked;
``sample`` reports which of them a launch made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from sim.impls.kit import kernel_bounds
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend.builders import unpinned_host_memory
from sim.oracle.rejection import Verification

MODULE = "vllm_ascend.sample.rejection_sampler"
READS_BEFORE_CU_NUM_DRAFT_TOKENS = (
    kernel_bounds.Access("rejection_greedy_sample_triton", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("rejection_random_sample_kernel", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("sample_recovered_tokens_kernel", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("expand_kernel", "cu_num_tokens_ptr", -1),
)


@dataclass
class Sampled:
    rows: list[list[int]]  # [num_reqs][max_spec_len + 1]
    reads_before: set  # the READS_BEFORE_CU_NUM_DRAFT_TOKENS accesses the kernels made
    could_read_before: bool  # a kernel that made one in 0.23.0 and main was launched


def sampling_metadata(temperature: tuple[float, ...], device: torch.device):
    """vLLM's ``SamplingMetadata`` for requests of these temperatures, no seeds, penalties or logprobs."""
    metadata = import_ascend("vllm.v1.sample.metadata")
    greedy = [t == 0 for t in temperature]
    given = {
        "temperature": torch.tensor(temperature, dtype=torch.float32, device=device),
        "all_greedy": all(greedy),
        "all_random": not any(greedy),
        "top_p": None,
        "top_k": None,
        "generators": {},
        "max_num_logprobs": None,
        "no_penalties": True,
        "prompt_token_ids": None,
        "output_token_ids": [[] for _ in temperature],
        "allowed_token_ids_mask": None,
        "bad_words_token_ids": {},
    }
    empty = torch.empty(0, device=device)
    for f in dataclasses.fields(metadata.SamplingMetadata):
        if f.name not in given and f.default is dataclasses.MISSING:
            given[f.name] = empty if f.name.endswith("_penalties") else _empty_logitsprocs()
    return metadata.SamplingMetadata(**given)


def _empty_logitsprocs():
    return import_ascend("vllm.v1.sample.logits_processor").LogitsProcessors()


def sample(v: Verification, device: torch.device, triton: bool = True, tolerate: bool = True) -> Sampled:
    """The checkout's output rows for ``v``, and which of the defect's reads its kernels made
    (``tolerate=False``: none is let through)."""
    module = import_ascend(MODULE)
    counts = [len(d) for d in v.drafts]
    cu = torch.tensor(counts, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    draft_ids = torch.tensor([t for d in v.drafts for t in d], dtype=torch.int32, device=device)
    bonus = torch.tensor(v.bonus, dtype=torch.int32, device=device).view(-1, 1)
    probs = None if v.draft_probs is None else v.draft_probs.to(device).contiguous()
    before = module.HAS_TRITON
    module.HAS_TRITON = bool(triton) and before
    try:
        with (
            unpinned_host_memory(),
            kernel_bounds.tolerating(*(READS_BEFORE_CU_NUM_DRAFT_TOKENS if tolerate else ())) as watched,
        ):
            out = module.rejection_sample(
                draft_ids,
                counts,
                v.max_spec_len,
                cu,
                probs,
                v.target_logits.to(device, torch.float32).contiguous(),
                bonus,
                sampling_metadata(v.temperature, device),
            )
    finally:
        module.HAS_TRITON = before
    kernels = {a.kernel for a in READS_BEFORE_CU_NUM_DRAFT_TOKENS}
    return Sampled(out.cpu().tolist(), set(watched.seen), bool(kernels & watched.launched))
