"""vllm-ascend's rejection sampler (``vllm_ascend.sample.rejection_sampler.rejection_sample``) as
``kit.rejection`` runs one: its Triton kernels (triton-ascend's ``get_element`` interpreted,
``fake_torch_npu``), or, with ``triton=False``, its torch fallback, what ``HAS_TRITON = False``
selects in vllm-ascend itself; pinned host buffers as plain ones (``sim.impls.kit.ascend.host_memory``).

``prepared_top_k``: the top-k the runner's ``_sample`` hands its rejection sampler under reduce sampling
(``prepare_sampling``), for a batch's requests' top-ks on a TP rank of some columns (``runner_top_k``: in
a process of one rank); ``sample`` hands it on as ``forward`` does.

``READS_BEFORE_CU_NUM_DRAFT_TOKENS``: the accesses of the defect
``rejection-kernels-read-before-their-buffer``, tolerated exactly (each kernel's load of element -1
of its cumulative-count argument), so that every other access and every output is still checked.
"""

from __future__ import annotations

import torch

from sim.impls.kit import kernel_bounds
from sim.impls.kit import rejection as kit
from sim.impls.kit.ascend import runner_source, world
from sim.impls.kit.ascend.host_memory import unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.signatures import takes
from sim.oracle.rejection import Verification

MODULE = "vllm_ascend.sample.rejection_sampler"
DEFECT = "rejection-kernels-read-before-their-buffer"
READS_BEFORE_CU_NUM_DRAFT_TOKENS = (
    kernel_bounds.Access("rejection_greedy_sample_triton", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("rejection_random_sample_kernel", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("sample_recovered_tokens_kernel", "cu_num_draft_tokens_ptr", -1),
    kernel_bounds.Access("expand_kernel", "cu_num_tokens_ptr", -1),
)


def _constraints(module, v: Verification):
    """The target's logits as ``AscendRejectionSampler.forward`` hands them to ``rejection_sample``: through
    the checkout's ``apply_sampling_constraints`` (temperatures, the requests' top-ks), with the top-k the
    runner's ``_sample`` prepares the sampler with (``prepared_top_k``; None unless reduce sampling and a
    request's top-k). Under ``enable_reduce_sample`` on TP ranks, random requests' logits become the
    candidates gathered over the ranks and their vocabulary ids."""

    def constrain(logits, cu_num_draft_tokens, metadata):
        if not takes(module.apply_sampling_constraints, "top_k"):  # v0.18.0: no reduce sampling
            return module.apply_sampling_constraints(logits, cu_num_draft_tokens, metadata)
        top_k = None
        if v.top_k is not None and import_ascend("vllm_ascend.ascend_config").get_ascend_config().enable_reduce_sample:
            top_k = prepared_top_k(v.top_k, logits.shape[1])
        return module.apply_sampling_constraints(logits, cu_num_draft_tokens, metadata, top_k)

    return constrain


def sample(v: Verification, device: torch.device, triton: bool = True, tolerate: bool = True) -> kit.Sampled:
    """The checkout's output rows for ``v``, and which of the defect's reads its kernels made
    (``tolerate=False``: none is let through)."""
    module = import_ascend(MODULE)
    metadata = kit.sampling_metadata(
        import_ascend("vllm.v1.sample.metadata"),
        import_ascend("vllm.v1.sample.logits_processor").LogitsProcessors(),
        v.temperature,
        device,
        v.top_k,
    )
    before = module.HAS_TRITON
    module.HAS_TRITON = bool(triton) and before
    try:
        with unpinned_host_memory():
            tolerated = READS_BEFORE_CU_NUM_DRAFT_TOKENS if tolerate else ()
            return kit.sample(module.rejection_sample, metadata, v, device, tolerated, _constraints(module, v))
    finally:
        module.HAS_TRITON = before


def runner_sample():
    """``NPUModelRunner._sample``, compiled from the checkout's source (a fix replaces this)."""
    return runner_source.runner_method("_sample")


class _TopKRecorder:
    """The rejection sampler as ``_sample`` meets it, recording the top-k it is prepared with."""

    top_k = None

    def prepare_sampling(self, top_k):
        self.top_k = top_k

    def __call__(self, *args, **kwargs):
        return None


def runner_top_k(top_ks: tuple[int, ...], columns: int):
    """``prepared_top_k`` under ``enable_reduce_sample``, in a process of one rank (its config made)."""
    from sim.impls.vllm_ascend.tensor_parallel import reduce_sample

    world.vllm_config(32)  # vllm-ascend's config, which _sample reads
    with reduce_sample(True):
        return prepared_top_k(top_ks, columns)


def prepared_top_k(top_ks: tuple[int, ...], columns: int):
    """What the checkout's ``_sample`` hands its rejection sampler's ``prepare_sampling`` for a spec-decode
    batch whose requests have ``top_ks`` (vLLM's ``InputBatch.top_k_cpu``: a request without top-k holds
    the vocabulary size) on a TP rank whose logits have ``columns`` columns, as an int (None: none; so
    under reduce sampling only). Raises what ``_sample`` raises."""
    from types import SimpleNamespace

    import numpy as np

    sampler = _TopKRecorder()
    batch = SimpleNamespace(  # the input batch's sampling state, as its requests set it
        top_k_cpu=np.array(top_ks, dtype=np.int32),
        sampling_metadata=SimpleNamespace(top_k=torch.tensor(top_ks, dtype=torch.int32)),
        update_async_output_token_ids=lambda: None,
    )
    runner = SimpleNamespace(input_batch=batch, rejection_sampler=sampler)
    runner_sample()(runner, torch.zeros(len(top_ks), columns), SimpleNamespace())
    return None if sampler.top_k is None else int(sampler.top_k)
