"""vLLM's rejection sampler (``vllm.v1.sample.rejection_sampler.rejection_sample``, the one its
``GPUModelRunner`` verifies drafts with) as ``kit.rejection`` runs one, its Triton kernels interpreted
on CPU tensors: a second, independently written sampler for the reference (``sim.oracle.rejection``)
to hold, so that the reference is seen to pass a correct sampler that is not vllm-ascend's."""

from __future__ import annotations

import torch

from sim.impls.kit import rejection as kit
from sim.impls.kit.vllm_types import import_vllm
from sim.oracle.rejection import Verification


def sample(v: Verification, device: torch.device) -> kit.Sampled:
    metadata = kit.sampling_metadata(
        import_vllm("vllm.v1.sample.metadata"),
        import_vllm("vllm.v1.sample.logits_processor").LogitsProcessors(),
        v.temperature,
        device,
    )
    return kit.sample(import_vllm("vllm.v1.sample.rejection_sampler").rejection_sample, metadata, v, device)
