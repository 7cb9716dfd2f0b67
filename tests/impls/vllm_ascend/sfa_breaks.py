"""Broken SFA metadata builders, for ``test_sfa_builder``: each wraps the build of the checkout's
``AscendSFAMetadataBuilder`` (``sfa_v1``: ``_build``, or ``build`` where it has no other, v0.21.0rc's), the
way its history broke it, so that an SFA draft's attention is handed something else than what the sparse
kernels must read:

- ``lengths_shared_across_steps``: every build writes its key lengths into one builder-owned buffer and
  hands a view of it (as the DSA-CP path's ``actual_seq_lengths_key`` did before vllm-ascend #10878, GLM-5
  acceptance falling with K > 1, #14236): ``_propose`` builds every step before the first forward, so each
  step's kernels read the last step's lengths;
- ``draft_rope_from_the_cache``: draft steps gather their cos and sin through the global buffer
  (``use_cache=True``, as before #10878), which the next step's build overwrites before the forward.
"""

from __future__ import annotations

import functools

import torch


def lengths_shared_across_steps(_build):
    @functools.wraps(_build)
    def wrapper(self, *args, **kwargs):
        meta = _build(self, *args, **kwargs)
        shared = self.__dict__.setdefault("_shared_key_lengths", torch.zeros_like(self.actual_seq_lengths_key))
        n = meta.seq_lens.shape[0]
        shared[:n] = meta.seq_lens
        meta.seq_lens = shared[:n]
        return meta

    return wrapper


def draft_rope_from_the_cache(_build):
    @functools.wraps(_build)
    def wrapper(self, *args, **kwargs):
        from sim.impls.kit.ascend.importing import import_ascend

        module = import_ascend("vllm_ascend.attention.sfa_v1")
        gather = module.get_cos_and_sin_mla
        module.get_cos_and_sin_mla = lambda positions, use_cache=False: gather(positions, use_cache=True)
        try:
            return _build(self, *args, **kwargs)
        finally:
            module.get_cos_and_sin_mla = gather

    return wrapper
